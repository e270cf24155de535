# Script mode (cmake -P), run after each GoogleTest binary is linked: lists
# its tests (--gtest_list_tests) and writes a ctest file with one test per
# test suite, named <binary>.<suite>, which runs that suite's cases in one
# process through cmake/run_gtest.sh.
#
# One process per suite rather than per case: a process start costs 20-60 ms
# (several times that under a sanitizer runtime) and most cases take less;
# the parameterised grids hold hundreds of cases each.
#
#   -D EXECUTABLE=<test binary> -D RUNNER=<run_gtest.sh> -D CTEST_FILE=<out>
#   -D LABELS=<list> -D TIMEOUT=<seconds> -D WORKING_DIRECTORY=<dir>
#   LABELS is comma-separated (a ';' list would arrive split).
foreach(var EXECUTABLE RUNNER CTEST_FILE TIMEOUT WORKING_DIRECTORY)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "RopeGtestSuites.cmake: ${var} is not set")
  endif()
endforeach()

execute_process(
  COMMAND "${EXECUTABLE}" --gtest_list_tests
  WORKING_DIRECTORY "${WORKING_DIRECTORY}"
  OUTPUT_VARIABLE listing
  ERROR_VARIABLE errors
  RESULT_VARIABLE status
  TIMEOUT 60)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${EXECUTABLE} --gtest_list_tests failed (${status}):\n${listing}\n${errors}")
endif()

# Suite lines end with "." (a typed suite adds "  # TypeParam = ..."); their
# cases follow, indented. Suites and cases named DISABLED_ do not run.
string(REPLACE ";" "\\;" listing "${listing}")
string(REPLACE "\n" ";" lines "${listing}")
set(suites)
set(suite "")
foreach(line IN LISTS lines)
  if(line MATCHES "^([^ #][^ ]*)\\.( +#.*)?$")
    set(suite "${CMAKE_MATCH_1}")
  elseif(suite AND line MATCHES "^  ([^ ]+)" AND NOT suite MATCHES "(^|/)DISABLED_"
         AND NOT CMAKE_MATCH_1 MATCHES "^DISABLED_")
    list(APPEND suites "${suite}")
  endif()
endforeach()
list(REMOVE_DUPLICATES suites)
if(NOT suites)
  message(FATAL_ERROR "${EXECUTABLE} lists no test")
endif()

string(REPLACE "," ";" LABELS "${LABELS}")
get_filename_component(binary "${EXECUTABLE}" NAME)
set(script "")
foreach(suite IN LISTS suites)
  set(name "${binary}.${suite}")
  string(APPEND script
    "add_test([==[${name}]==] [==[${RUNNER}]==] [==[${EXECUTABLE}]==]"
    " [==[--gtest_filter=${suite}.*]==] --gtest_brief=1)\n"
    "set_tests_properties([==[${name}]==] PROPERTIES LABELS [==[${LABELS}]==]"
    " TIMEOUT ${TIMEOUT} SKIP_RETURN_CODE 77 WORKING_DIRECTORY [==[${WORKING_DIRECTORY}]==])\n")
endforeach()
file(WRITE "${CTEST_FILE}" "${script}")
