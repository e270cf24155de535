# Helpers shared by every target: warnings and sanitizers per target, and one
# call per library (rope_cc_library), executable (rope_cc_binary) and
# GoogleTest binary (rope_cc_test). No global flags: each target states what
# it needs.

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
  # a line nobody reads; frame pointers give whole stacks in reports, and
  # line tables (-g1) their files and lines: full debug info (-g) would add
  # a fifth to each compile and nothing to a report.
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${sanitizers} -fno-sanitize-recover=all
                             -fno-omit-frame-pointer -g1>)
  target_link_options(${target} ${scope} $<HOST_LINK:-fsanitize=${sanitizers}>)
endfunction()

function(rope_set_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
  rope_apply_sanitizers(${target})
endfunction()

# The include root of every library: code includes "common/...",
# "core/engine/...", "client/..." from the repository root, and from
# include/ropeserve once installed (see client/CMakeLists.txt).
set(ROPE_INCLUDE_INTERFACE
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/ropeserve>)

# rope_cc_library(NAME <name>
#                 [SRCS <file>...]          # none: a header-only (INTERFACE) library
#                 [HDRS <file>...]          # its public headers
#                 [PUBLIC_DEPS <target>...] # needed by a header in HDRS (PUBLIC)
#                 [DEPS <target>...]        # needed by SRCS only (PRIVATE)
#                 [DEFINES <def>...]        # private compile definitions
#                 [TYPE STATIC|SHARED|MODULE])  # default STATIC
# One library per call, in the spirit of abseil's absl_cc_library: includes
# rooted at the repository, warnings and sanitizers per target
# (rope_set_warnings), dependencies PUBLIC only when a public header needs
# them.
function(rope_cc_library)
  cmake_parse_arguments(L "" "NAME;TYPE" "SRCS;HDRS;PUBLIC_DEPS;DEPS;DEFINES" ${ARGN})
  if(NOT L_NAME)
    message(FATAL_ERROR "rope_cc_library: NAME is required")
  endif()
  if(NOT L_SRCS)
    add_library(${L_NAME} INTERFACE ${L_HDRS})
    target_include_directories(${L_NAME} INTERFACE ${ROPE_INCLUDE_INTERFACE})
    target_link_libraries(${L_NAME} INTERFACE ${L_PUBLIC_DEPS} ${L_DEPS})
    return()
  endif()
  if(NOT L_TYPE)
    set(L_TYPE STATIC)
  endif()
  add_library(${L_NAME} ${L_TYPE} ${L_SRCS} ${L_HDRS})
  target_include_directories(${L_NAME} PUBLIC ${ROPE_INCLUDE_INTERFACE})
  target_link_libraries(${L_NAME} PUBLIC ${L_PUBLIC_DEPS} PRIVATE ${L_DEPS})
  if(L_DEFINES)
    target_compile_definitions(${L_NAME} PRIVATE ${L_DEFINES})
  endif()
  rope_set_warnings(${L_NAME})
endfunction()

# rope_cc_binary(NAME <name> SRCS <file>... [DEPS <target>...] [DEFINES <def>...])
# An executable in bin/ with the project's warnings and sanitizers.
function(rope_cc_binary)
  cmake_parse_arguments(B "" "NAME" "SRCS;DEPS;DEFINES" ${ARGN})
  add_executable(${B_NAME} ${B_SRCS})
  target_include_directories(${B_NAME} PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${B_NAME} PRIVATE ${B_DEPS})
  if(B_DEFINES)
    target_compile_definitions(${B_NAME} PRIVATE ${B_DEFINES})
  endif()
  rope_set_warnings(${B_NAME})
endfunction()

# rope_cc_test(NAME <name> SRCS <file>... [DEPS <target>...] [DEFINES <def>...]
#              [LABELS <label>...] [STAGES <stage>...] [TIMEOUT <seconds>]
#              [NEEDS_ROPESERVE])
# A GoogleTest binary; each of its test suites is a ctest test named
# <binary>.<suite> (cmake/RopeGtestSuites.cmake). Labels: the folder under
# tests/ (its area), LABELS, and its stages (cmake/RopeTestStages.cmake: the
# folder's defaults unless STAGES is given; `STAGES` alone: the full run
# only). TIMEOUT (default 300 s) applies to each suite, four times as long
# in a sanitizer build.
# NEEDS_ROPESERVE: the test starts the built server; ROPESERVE_PATH names it
# and it is built first.
function(rope_cc_test)
  cmake_parse_arguments(T "NEEDS_ROPESERVE" "NAME;TIMEOUT" "SRCS;DEPS;DEFINES;LABELS;STAGES"
    ${ARGN})
  rope_cc_binary(NAME ${T_NAME} SRCS ${T_SRCS}
    DEPS ${T_DEPS} GTest::gtest GTest::gtest_main
    DEFINES ${T_DEFINES})
  set(needs ${T_NAME})
  if(T_NEEDS_ROPESERVE)
    target_compile_definitions(${T_NAME} PRIVATE ROPESERVE_PATH="$<TARGET_FILE:ropeserve>")
    add_dependencies(${T_NAME} ropeserve)
    list(APPEND needs ropeserve)
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  if(ROPE_SANITIZE)
    math(EXPR T_TIMEOUT "${T_TIMEOUT} * 4")
  endif()
  set(use_default TRUE)
  if("STAGES" IN_LIST ARGN)
    set(use_default FALSE)
  endif()
  rope_test_labels(labels ${T_NAME} ${use_default} ${T_STAGES})
  list(APPEND labels ${T_LABELS})
  list(REMOVE_DUPLICATES labels)
  rope_gtest_register(${T_NAME} ${T_TIMEOUT} "${labels}")
  rope_test_stage_targets("${labels}" ${needs})
  rope_defer_test_folder_end()
endfunction()

# rope_py_test(NAME <name> (SCRIPT <file.py> | PYTEST <dir-or-file>)
#              [ARGS <arg>...] [LABELS <label>...] [STAGES <stage>...]
#              [TIMEOUT <seconds>] [ENVIRONMENT <var=value>...]
#              [WITH_CLIENT_PACKAGE] [DEPENDS <target>...])
# A Python test run by Debian's python3 (its grpcio, numpy) with
# tests/support/python on PYTHONPATH, so that it starts servers through
# ropeserve_process.RopeServe. PYTEST runs pytest on the given path instead
# of a script. WITH_CLIENT_PACKAGE puts the staged Python client package
# (target ropeserve_python, client/python) first on PYTHONPATH and sets
# ROPESERVE_BINARY; the test is not registered when that package is not
# built. Exit status 77 means skipped. Not registered (the top level says so)
# when /usr/bin/python3 is missing. Labels and STAGES as for rope_cc_test;
# its stages build the targets named by $<TARGET_FILE:...> in ARGS and
# ENVIRONMENT, the client package with WITH_CLIENT_PACKAGE, and DEPENDS.
function(rope_py_test)
  cmake_parse_arguments(T "WITH_CLIENT_PACKAGE" "NAME;SCRIPT;PYTEST;TIMEOUT"
    "ARGS;LABELS;STAGES;ENVIRONMENT;DEPENDS" ${ARGN})
  if(NOT ROPE_SYSTEM_PYTHON3)
    return()
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set(python_path ${PROJECT_SOURCE_DIR}/tests/support/python)
  set(environment ${T_ENVIRONMENT} "PYTHONDONTWRITEBYTECODE=1")
  rope_targets_in(needs ${T_ARGS} ${T_ENVIRONMENT})
  list(APPEND needs ${T_DEPENDS})
  if(T_WITH_CLIENT_PACKAGE)
    if(NOT TARGET ropeserve_python)
      message(STATUS "${T_NAME}: not registered (the Python client package is not built)")
      return()
    endif()
    set(python_path "$<TARGET_PROPERTY:ropeserve_python,ROPE_PYTHONPATH>:${python_path}")
    list(APPEND environment "ROPESERVE_BINARY=$<TARGET_FILE:ropeserve>")
    list(APPEND needs ropeserve_python ropeserve)
  endif()
  if(T_PYTEST)
    set(command -m pytest -q -p no:cacheprovider ${T_PYTEST}
        --basetemp=${CMAKE_CURRENT_BINARY_DIR}/pytest_${T_NAME})
  else()
    set(command ${T_SCRIPT})
  endif()
  add_test(NAME ${T_NAME} COMMAND ${ROPE_SYSTEM_PYTHON3} ${command} ${T_ARGS})
  set(use_default TRUE)
  if("STAGES" IN_LIST ARGN)
    set(use_default FALSE)
  endif()
  rope_test_labels(labels ${T_NAME} ${use_default} ${T_STAGES})
  list(APPEND labels ${T_LABELS})
  list(REMOVE_DUPLICATES labels)
  set_tests_properties(${T_NAME} PROPERTIES
    LABELS "${labels}" TIMEOUT ${T_TIMEOUT} SKIP_RETURN_CODE 77
    ENVIRONMENT "PYTHONPATH=${python_path};${environment}")
  set_property(DIRECTORY APPEND PROPERTY ROPE_STAGED_TESTS ${T_NAME})
  rope_test_stage_targets("${labels}" ${needs})
  rope_defer_test_folder_end()
endfunction()
