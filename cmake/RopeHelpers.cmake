# Small helpers shared by every target: warnings per target, and a test helper.
# No global flags: each target states what it needs.

# Sanitizers for every target of ours (each calls rope_set_warnings), e.g.
# -DROPE_SANITIZE=address,undefined (scripts/sanitize.sh). Per target, not in
# CMAKE_CXX_FLAGS: generated protobuf code and Debian's prebuilt libraries
# (gRPC, protobuf, Abseil, OpenBLAS) stay uninstrumented, which ASan and UBSan
# allow; the link flag travels to every executable that links one of ours.
set(ROPE_SANITIZE "" CACHE STRING
    "Comma-separated -fsanitize= list for the project's targets (empty: none)")

function(rope_apply_sanitizers target)
  set(sanitizers "${ROPE_SANITIZE}")
  # libFuzzer's coverage feedback needs the code under test instrumented;
  # only the fuzzer binary itself links libFuzzer (-fsanitize=fuzzer).
  if(ROPE_BUILD_FUZZERS)
    if(sanitizers)
      set(sanitizers "${sanitizers},fuzzer-no-link")
    else()
      set(sanitizers "fuzzer-no-link")
    endif()
  endif()
  if(NOT sanitizers)
    return()
  endif()
  get_target_property(type ${target} TYPE)
  set(scope PUBLIC)
  if(type STREQUAL "INTERFACE_LIBRARY")
    set(scope INTERFACE)
  endif()
  # Inside a generator expression a bare comma separates arguments.
  string(REPLACE "," "$<COMMA>" sanitizers "${sanitizers}")
  # -fno-sanitize-recover: a UBSan finding fails the test instead of printing
  # a line nobody reads; frame pointers give whole stacks in reports.
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${sanitizers} -fno-sanitize-recover=all
                             -fno-omit-frame-pointer -g>)
  target_link_options(${target} ${scope} $<HOST_LINK:-fsanitize=${sanitizers}>)
endfunction()

function(rope_set_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
  rope_apply_sanitizers(${target})
endfunction()

# rope_cc_test(NAME name SRCS a.cc b.cc DEPS lib1 lib2 [LABELS l1 l2])
# Builds a GoogleTest binary and registers each of its tests with ctest.
function(rope_cc_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SRCS})
  target_link_libraries(${T_NAME} PRIVATE ${T_DEPS} GTest::gtest GTest::gtest_main)
  rope_set_warnings(${T_NAME})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  gtest_discover_tests(${T_NAME}
    DISCOVERY_TIMEOUT 60
    PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "${T_LABELS}")
endfunction()
