# rope_proto_library: compiles a set of .proto files into one static library.
#
#   rope_proto_library(NAME <target>
#                      IMPORT_DIR <dir>          # --proto_path; PROTOS are relative to it
#                      PROTOS <a.proto> ...
#                      [GRPC])                   # also generate gRPC stubs (.grpc.pb.*)
#
# The generated files go to ${ROPE_PROTO_GEN_DIR}/<path of the proto without
# .proto>.{pb,grpc.pb}.{h,cc}, so that code includes them by the proto's own
# path ("rope/v1/rope.pb.h", "grpc/health/v1/health.pb.h"). Every proto
# target shares that directory.
#
# An explicit add_custom_command rather than protobuf_generate(): the latter
# misbehaves with protos outside the current source dir on CMake 3.25 /
# protobuf 3.21. Each .proto is compiled by one target only: protobuf aborts
# at start-up when a binary registers the same .proto file twice.
set(ROPE_PROTO_GEN_DIR ${PROJECT_BINARY_DIR}/proto/gen CACHE INTERNAL
    "Where rope_proto_library writes generated code")

function(rope_proto_library)
  cmake_parse_arguments(P "GRPC" "NAME;IMPORT_DIR" "PROTOS" ${ARGN})
  if(NOT P_NAME OR NOT P_IMPORT_DIR OR NOT P_PROTOS)
    message(FATAL_ERROR "rope_proto_library: NAME, IMPORT_DIR and PROTOS are required")
  endif()
  file(MAKE_DIRECTORY ${ROPE_PROTO_GEN_DIR})
  set(srcs)
  set(hdrs)
  foreach(rel IN LISTS P_PROTOS)
    string(REGEX REPLACE "\\.proto$" "" stem ${rel})
    set(out ${ROPE_PROTO_GEN_DIR}/${stem})
    set(outputs ${out}.pb.cc ${out}.pb.h)
    set(args --proto_path=${P_IMPORT_DIR} --cpp_out=${ROPE_PROTO_GEN_DIR})
    if(P_GRPC)
      list(APPEND outputs ${out}.grpc.pb.cc ${out}.grpc.pb.h)
      list(APPEND args --grpc_out=${ROPE_PROTO_GEN_DIR}
                       --plugin=protoc-gen-grpc=$<TARGET_FILE:gRPC::grpc_cpp_plugin>)
    endif()
    add_custom_command(
      OUTPUT ${outputs}
      COMMAND protobuf::protoc ${args} ${P_IMPORT_DIR}/${rel}
      DEPENDS ${P_IMPORT_DIR}/${rel} protobuf::protoc
      COMMENT "protoc ${rel}"
      VERBATIM)
    list(FILTER outputs INCLUDE REGEX "\\.cc$")
    list(APPEND srcs ${outputs})
  endforeach()
  add_library(${P_NAME} STATIC ${srcs})
  target_include_directories(${P_NAME} PUBLIC $<BUILD_INTERFACE:${ROPE_PROTO_GEN_DIR}>
                                               $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/ropeserve>)
  target_link_libraries(${P_NAME} PUBLIC protobuf::libprotobuf)
  if(P_GRPC)
    target_link_libraries(${P_NAME} PUBLIC gRPC::grpc++)
  endif()
endfunction()
