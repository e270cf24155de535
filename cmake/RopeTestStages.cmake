# Test stages: which runs of scripts/test.sh run a test, as ctest labels
# (docs/testing.md, "Stages").
#
#   fast  the pre-commit run: `ctest --test-dir build -L fast -j2`
#   asan  scripts/sanitize.sh: the ASan + UBSan build
#   tsan  scripts/tsan.sh: the ThreadSanitizer build
#
# The full run (scripts/test.sh's ctest stage) runs every test whatever its
# stages. Each test carries its area (the folder under tests/) and its
# stages as labels. A folder's default stages are declared once, in
# tests/CMakeLists.txt (rope_test_area); rope_cc_test and rope_py_test take
# STAGES to choose others for one test, and a plain add_test in a folder gets
# the area and the folder's defaults when the folder ends, so a new test lands
# in its folder's stages without anyone naming them.
#
# For each stage the target rope_tests_<stage> builds what that stage's tests
# run (the sanitizer scripts build only that).

set(ROPE_TEST_STAGES fast asan tsan CACHE INTERNAL "The test stages (cmake/RopeTestStages.cmake)")
foreach(stage IN LISTS ROPE_TEST_STAGES)
  add_custom_target(rope_tests_${stage})
endforeach()

# rope_test_area(<area> STAGES <stage>...)
# The default stages of the tests in tests/<area>/ (no STAGES: the full run only).
function(rope_test_area area)
  cmake_parse_arguments(A "" "" "STAGES" ${ARGN})
  rope_check_stages("tests/${area}" ${A_STAGES})
  set_property(GLOBAL PROPERTY ROPE_TEST_AREA_${area} "${A_STAGES}")
  set_property(GLOBAL PROPERTY ROPE_TEST_AREA_${area}_DECLARED TRUE)
endfunction()

function(rope_check_stages what)
  foreach(stage IN LISTS ARGN)
    if(NOT stage IN_LIST ROPE_TEST_STAGES)
      message(FATAL_ERROR "${what}: unknown test stage '${stage}' (stages: ${ROPE_TEST_STAGES})")
    endif()
  endforeach()
endfunction()

# The area of the current folder: its first component under tests/.
function(rope_current_test_area out)
  file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR}/tests ${CMAKE_CURRENT_SOURCE_DIR})
  string(REGEX REPLACE "/.*" "" area "${rel}")
  set(${out} ${area} PARENT_SCOPE)
endfunction()

# rope_test_labels(<out> <what> [<explicit stages...>] [USE_DEFAULT])
# The labels of a test in the current folder: its area, then its stages
# (the explicit ones, or the folder's defaults with USE_DEFAULT).
function(rope_test_labels out what use_default)
  rope_current_test_area(area)
  if(use_default)
    get_property(declared GLOBAL PROPERTY ROPE_TEST_AREA_${area}_DECLARED)
    if(NOT declared)
      # A folder nobody declared yet: the stages of the C++ test folders.
      set_property(GLOBAL PROPERTY ROPE_TEST_AREA_${area} "fast;asan")
      set_property(GLOBAL PROPERTY ROPE_TEST_AREA_${area}_DECLARED TRUE)
      message(STATUS "tests/${area}: no rope_test_area() in tests/CMakeLists.txt; its tests "
                     "run in the stages fast and asan")
    endif()
    get_property(stages GLOBAL PROPERTY ROPE_TEST_AREA_${area})
  else()
    set(stages ${ARGN})
    rope_check_stages("${what}" ${stages})
  endif()
  set(${out} ${area} ${stages} PARENT_SCOPE)
endfunction()

# rope_test_stage_targets(<labels> <target>...): the stages among <labels>
# build <target>s.
function(rope_test_stage_targets labels)
  foreach(stage IN LISTS labels)
    if(stage IN_LIST ROPE_TEST_STAGES AND ARGN)
      add_dependencies(rope_tests_${stage} ${ARGN})
    endif()
  endforeach()
endfunction()

# The targets named by $<TARGET_FILE:...> in a list of arguments.
function(rope_targets_in out)
  set(found)
  foreach(arg IN LISTS ARGN)
    string(REGEX MATCHALL "\\$<TARGET_FILE:[A-Za-z0-9_.+-]+>" refs "${arg}")
    foreach(ref IN LISTS refs)
      string(REGEX REPLACE "^\\$<TARGET_FILE:(.*)>$" "\\1" target "${ref}")
      list(APPEND found ${target})
    endforeach()
  endforeach()
  list(REMOVE_DUPLICATES found)
  set(${out} ${found} PARENT_SCOPE)
endfunction()

# rope_test_stages(TEST <name> [STAGES <stage>...] [DEPENDS <target>...])
# Labels a test made with add_test (its area and stages: the folder's
# defaults unless STAGES is given) and has its stages build DEPENDS.
function(rope_test_stages)
  cmake_parse_arguments(S "" "TEST" "STAGES;DEPENDS" ${ARGN})
  set(use_default TRUE)
  if("STAGES" IN_LIST ARGN)
    set(use_default FALSE)
  endif()
  rope_test_labels(labels "${S_TEST}" ${use_default} ${S_STAGES})
  rope_add_test_labels(${S_TEST} ${labels})
  rope_test_stage_targets("${labels}" ${S_DEPENDS})
  set_property(DIRECTORY APPEND PROPERTY ROPE_STAGED_TESTS ${S_TEST})
  rope_defer_test_folder_end()
endfunction()

function(rope_add_test_labels test)
  get_test_property(${test} LABELS labels)
  if(NOT labels)
    set(labels)
  endif()
  list(APPEND labels ${ARGN})
  list(REMOVE_DUPLICATES labels)
  set_tests_properties(${test} PROPERTIES LABELS "${labels}")
endfunction()

# At the end of the folder: the area and the folder's default stages on each
# test that add_test made there and no helper labelled.
function(rope_label_unstaged_tests)
  get_property(tests DIRECTORY PROPERTY TESTS)
  get_property(staged DIRECTORY PROPERTY ROPE_STAGED_TESTS)
  foreach(test IN LISTS tests)
    if(NOT test IN_LIST staged)
      rope_test_labels(labels "${test}" TRUE)
      rope_add_test_labels(${test} ${labels})
    endif()
  endforeach()
endfunction()

# At the end of a test folder (deferred by the first helper called there):
# the labels above, and the test code's compile settings on every target the
# folder defined (cmake/RopeTestBuild.cmake).
function(rope_test_folder_end)
  rope_label_unstaged_tests()
  get_property(targets DIRECTORY PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target IN LISTS targets)
    rope_test_code(${target})
  endforeach()
endfunction()

function(rope_defer_test_folder_end)
  get_property(deferred DIRECTORY PROPERTY ROPE_TEST_FOLDER_END_DEFERRED)
  if(NOT deferred)
    set_property(DIRECTORY PROPERTY ROPE_TEST_FOLDER_END_DEFERRED TRUE)
    cmake_language(DEFER CALL rope_test_folder_end)
  endif()
endfunction()

# rope_gtest_register(<target> <timeout> <labels>): the ctest tests of a
# GoogleTest binary, one per test suite (cmake/RopeGtestSuites.cmake writes
# them after each link; until the binary is built, one <target>_NOT_BUILT
# test stands for them and fails). The binary is also listed for its stages
# (tests/stage_<stage>_binaries.txt: scripts/tsan.sh runs those directly).
function(rope_gtest_register target timeout labels)
  set(tests_file ${CMAKE_CURRENT_BINARY_DIR}/${target}_suites.cmake)
  # A list would reach the script as separate arguments (only its first
  # element as LABELS): it travels comma-separated.
  string(REPLACE ";" "," labels_arg "${labels}")
  add_custom_command(TARGET ${target} POST_BUILD
    BYPRODUCTS ${tests_file}
    COMMAND ${CMAKE_COMMAND}
      -D EXECUTABLE=$<TARGET_FILE:${target}>
      -D RUNNER=${PROJECT_SOURCE_DIR}/cmake/run_gtest.sh
      -D CTEST_FILE=${tests_file}
      -D LABELS=${labels_arg}
      -D TIMEOUT=${timeout}
      -D WORKING_DIRECTORY=${CMAKE_CURRENT_BINARY_DIR}
      -P ${PROJECT_SOURCE_DIR}/cmake/RopeGtestSuites.cmake
    VERBATIM)
  set(include_file ${CMAKE_CURRENT_BINARY_DIR}/${target}_include.cmake)
  file(WRITE ${include_file}
    "if(EXISTS \"${tests_file}\")\n"
    "  include(\"${tests_file}\")\n"
    "else()\n"
    "  add_test(${target}_NOT_BUILT ${target}_NOT_BUILT)\n"
    "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${include_file})
  foreach(stage IN LISTS labels)
    if(stage IN_LIST ROPE_TEST_STAGES)
      set_property(GLOBAL APPEND PROPERTY ROPE_STAGE_BINARIES_${stage} $<TARGET_FILE:${target}>)
    endif()
  endforeach()
endfunction()

# At the end of the configure: tests/stage_<stage>_binaries.txt, the
# GoogleTest binaries of each stage, one path a line.
function(rope_write_stage_binaries)
  foreach(stage IN LISTS ROPE_TEST_STAGES)
    get_property(binaries GLOBAL PROPERTY ROPE_STAGE_BINARIES_${stage})
    list(JOIN binaries "\n" content)
    file(GENERATE OUTPUT ${PROJECT_BINARY_DIR}/tests/stage_${stage}_binaries.txt
      CONTENT "${content}\n")
  endforeach()
endfunction()
cmake_language(DEFER DIRECTORY ${PROJECT_SOURCE_DIR} CALL rope_write_stage_binaries)
