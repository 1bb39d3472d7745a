# magic_add_suite_tests(TARGET SOURCES <files> ONE_PROCESS_A_TEST <suites> OWN_ENTRY <suites>
#                       EXCLUDE <gtest filter> TIMEOUT <s>)
#
# Registers a GoogleTest binary's tests with ctest. A test process spends about a second before its
# first test (perf: the dynamic loader binding LibTorch's symbols, then its operator registration),
# as long as most unit tests take. So the suites of plain TEST/TEST_F tests found in SOURCES, and
# the instantiations of parameterized ones (INSTANTIATE_TEST_SUITE_P(Prefix, Suite): Prefix/Suite),
# run together in one process, the ctest entry `quick_suites` (119 suites in 16 s where one process
# a suite took 132 s), except:
#  - those named in OWN_ENTRY (suites of several seconds), each one entry running its tests in one
#    process, so that two cores share the long ones out;
#  - those named in ONE_PROCESS_A_TEST (Suite or Prefix/Suite: tests that start ranks or tools for
#    many seconds each), one entry a test (gtest_discover_tests).
# EXCLUDE is a negative filter for all ("*Long.*"). One suite alone: TARGET --gtest_filter=Suite.*
#
# A suite added to an existing file is found at the next configure (the sources are configure
# dependencies); until then gtest_discover_tests runs it a test at a time. An entry whose filter
# has a pattern that matches no test fails (tests/main.cpp), so a suite that went away cannot pass
# unseen.
include(GoogleTest)

function(magic_add_suite_tests TARGET)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;ONE_PROCESS_A_TEST;OWN_ENTRY;EXCLUDE" ${ARGN})
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${ARG_SOURCES})
  set(suites "")
  foreach(source ${ARG_SOURCES})
    file(STRINGS ${source} heads REGEX "^TEST(_F)?\\([A-Za-z0-9_]+,")
    foreach(head ${heads})
      string(REGEX REPLACE "^TEST(_F)?\\(([A-Za-z0-9_]+),.*" "\\2" suite "${head}")
      list(APPEND suites ${suite})
    endforeach()
    # An instantiation's two names may be on the lines after its opening parenthesis.
    file(READ ${source} text)
    string(REGEX MATCHALL "INSTANTIATE_TEST_SUITE_P\\([ \t\r\n]*[A-Za-z0-9_]+,[ \t\r\n]*[A-Za-z0-9_]+" heads "${text}")
    foreach(head ${heads})
      string(REGEX REPLACE "^INSTANTIATE_TEST_SUITE_P\\([ \t\r\n]*([A-Za-z0-9_]+),[ \t\r\n]*([A-Za-z0-9_]+)$" "\\1/\\2"
             instantiation "${head}")
      list(APPEND suites ${instantiation})
    endforeach()
  endforeach()
  list(REMOVE_DUPLICATES suites)
  list(SORT suites)
  set(grouped "")
  set(quick "")
  foreach(suite ${suites})
    if(NOT suite IN_LIST ARG_ONE_PROCESS_A_TEST AND NOT suite MATCHES "Long$")
      list(APPEND grouped ${suite})
      if(suite IN_LIST ARG_OWN_ENTRY)
        add_test(NAME ${suite} COMMAND ${TARGET} --gtest_filter=${suite}.*
                 WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
        set_tests_properties(${suite} PROPERTIES TIMEOUT ${ARG_TIMEOUT})
      else()
        list(APPEND quick ${suite}.*)
      endif()
    endif()
  endforeach()
  foreach(suite ${ARG_OWN_ENTRY})
    if(NOT suite IN_LIST grouped)
      message(FATAL_ERROR "OWN_ENTRY names ${suite}, which is no suite of ${TARGET}'s sources")
    endif()
  endforeach()
  if(quick)
    list(JOIN quick ":" quick_filter)
    add_test(NAME quick_suites COMMAND ${TARGET} --gtest_filter=${quick_filter}
             WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
    set_tests_properties(quick_suites PROPERTIES TIMEOUT ${ARG_TIMEOUT})
  endif()
  list(TRANSFORM grouped APPEND ".*")
  list(JOIN grouped ":" grouped_filter)
  gtest_discover_tests(${TARGET} DISCOVERY_TIMEOUT 60 TEST_FILTER "-${ARG_EXCLUDE}:${grouped_filter}"
                       PROPERTIES TIMEOUT ${ARG_TIMEOUT})
endfunction()
