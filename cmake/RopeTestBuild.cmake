# How test code compiles: the targets defined under tests/ (test binaries,
# their helper libraries, test-only programs). Product code (common/, core/,
# server/, client/) keeps its build type's flags.
#
# -O1: most of a test file's compile time at -O3 goes to optimising
# GoogleTest's and protobuf's expanded code, which runs once; -O1 halves
# that (tests/service/corpus_test.cc: 21 s -> 12 s of CPU). In a sanitizer
# build, -O0: optimising instrumented code costs more again (the same file
# under ASan + UBSan: 32 s at -O1, 20 s at -O0), while the product libraries
# the tests drive keep the build type's -O1. -O levels do not change IEEE
# results here: no -ffast-math, and test code is compiled for baseline
# x86-64, which has no fused multiply-add to contract into.
# -pthread everywhere, so that every test target shares the precompiled
# header below (GCC refuses it when _REENTRANT differs).
if(ROPE_SANITIZE)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-O0> $<$<COMPILE_LANGUAGE:CXX>:-pthread>)
else()
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-O1> $<$<COMPILE_LANGUAGE:CXX>:-pthread>)
endif()

# One precompiled header shared by every test target (REUSE_FROM): the
# GoogleTest, gMock, gRPC, protobuf and Abseil headers nearly every test file
# includes, which take 2.5-6 s of CPU to parse in each of some 90 files.
# Only system headers go in it, so that a target whose flags made GCC refuse
# it (-Winvalid-pch says so) still compiles them from source.
#
# ccache cannot cache a compile that uses a precompiled header unless it is
# configured for it (sloppiness pch_defines,time_macros), so the default is
# ON only without a compiler launcher: CI's fresh builds, not rope-build's
# ccache builds.
if(CMAKE_CXX_COMPILER_LAUNCHER)
  set(rope_test_pch_default OFF)
else()
  set(rope_test_pch_default ON)
endif()
option(ROPE_TEST_PCH "One precompiled header for the test code" ${rope_test_pch_default})

if(ROPE_TEST_PCH)
  set(rope_test_pch_source ${CMAKE_CURRENT_BINARY_DIR}/rope_test_pch.cc)
  file(WRITE ${rope_test_pch_source}
    "// The target that owns the test code's precompiled header (cmake/RopeTestBuild.cmake).\n")
  add_library(rope_test_pch OBJECT ${rope_test_pch_source})
  target_link_libraries(rope_test_pch PRIVATE
    GTest::gtest GTest::gmock gRPC::grpc++ protobuf::libprotobuf
    absl::status absl::statusor absl::strings absl::str_format absl::time
    absl::synchronization Threads::Threads)
  target_precompile_headers(rope_test_pch PRIVATE
    <algorithm> <atomic> <chrono> <cmath> <cstdint> <cstring> <functional> <map>
    <memory> <optional> <string> <thread> <utility> <vector>
    <gtest/gtest.h> <gmock/gmock.h>
    <grpcpp/grpcpp.h> <google/protobuf/message.h>
    <absl/status/status.h> <absl/status/statusor.h> <absl/strings/str_cat.h>
    <absl/strings/str_format.h> <absl/synchronization/mutex.h> <absl/time/time.h>)
  rope_set_warnings(rope_test_pch)
endif()

# rope_test_code(<target>): a test target shares the precompiled header when
# its flags let it (C++, not position-independent: GCC refuses a header
# precompiled with other -fpic/-fpie settings).
function(rope_test_code target)
  if(NOT ROPE_TEST_PCH OR target STREQUAL "rope_test_pch")
    return()
  endif()
  get_target_property(type ${target} TYPE)
  get_target_property(pic ${target} POSITION_INDEPENDENT_CODE)
  get_target_property(imported ${target} IMPORTED)
  if(imported OR pic OR NOT type MATCHES "^(EXECUTABLE|STATIC_LIBRARY|OBJECT_LIBRARY)$")
    return()
  endif()
  get_target_property(sources ${target} SOURCES)
  if(NOT sources MATCHES "\\.cc(;|$)")
    return()
  endif()
  target_precompile_headers(${target} REUSE_FROM rope_test_pch)
endfunction()
