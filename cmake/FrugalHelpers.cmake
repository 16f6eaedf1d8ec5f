# Helpers shared by every frugal target.

# Warnings on, as errors only where the code is ours (torch headers come in as -isystem).
function(frugal_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wno-unused-parameter)
  if(FRUGAL_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()

# frugal_add_test(NAME SOURCES... [LABELS l1 l2] [TEST_FILTER gtest-filter])
# Tests are few executables (torch headers are slow to compile); each registers its GoogleTest
# cases with CTest one by one, so `ctest -R` picks single cases.
function(frugal_add_test name)
  cmake_parse_arguments(ARG "" "TEST_FILTER" "SOURCES;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE frugal_lib GTest::gtest GTest::gtest_main)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests
                             ${PROJECT_BINARY_DIR}/generated)
  target_include_directories(${name} SYSTEM PRIVATE ${FRUGAL_TOMLPP_INCLUDE})
  target_compile_definitions(${name} PRIVATE
    FRUGAL_BINARY="$<TARGET_FILE:frugal>"
    FRUGAL_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  add_dependencies(${name} frugal)
  frugal_warnings(${name})
  if(FRUGAL_PCH)
    target_precompile_headers(${name} REUSE_FROM frugal_lib)
  endif()
  # Tests run side by side (ctest -j): like ranks sharing a machine, the frugal processes they
  # start run with passive OpenMP workers, so that none spins on cores another test computes on.
  if(ARG_TEST_FILTER)
    gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 TEST_FILTER "${ARG_TEST_FILTER}"
                         PROPERTIES ENVIRONMENT "OMP_WAIT_POLICY=PASSIVE" LABELS "${ARG_LABELS}")
  else()
    gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
                         PROPERTIES ENVIRONMENT "OMP_WAIT_POLICY=PASSIVE" LABELS "${ARG_LABELS}")
  endif()
endfunction()
