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
  set_target_properties(${name} PROPERTIES ENABLE_EXPORTS ON)  # crash reports name test functions
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

# frugal_pch_where_it_pays(SOURCES...)
# LibTorch's precompiled header is ~700 MB: loading it costs ~8 s per file, which is nearly all
# of the compile time of a file that never sees LibTorch's API (0.5 s without it), while a file
# that includes <torch/torch.h> takes ~37 s without it and ~20 s with it. So the precompiled
# header goes only to the files whose includes (followed through frugal's own headers) reach
# LibTorch's heavy headers: <torch/...> (but torch/version.h), <ATen/ATen.h>, <ATen/Functions.h>.
# The others are marked SKIP_PRECOMPILE_HEADERS, in the current directory's scope.
function(_frugal_reaches_torch file out)
  string(MAKE_C_IDENTIFIER "${file}" key)
  get_property(known GLOBAL PROPERTY FRUGAL_TORCH_${key} SET)
  if(known)
    get_property(heavy GLOBAL PROPERTY FRUGAL_TORCH_${key})
    set(${out} ${heavy} PARENT_SCOPE)
    return()
  endif()
  set_property(GLOBAL PROPERTY FRUGAL_TORCH_${key} OFF)  # a cycle of includes ends here
  file(STRINGS "${file}" lines REGEX "^#include [<\"]")
  get_filename_component(here "${file}" DIRECTORY)
  set(heavy OFF)
  foreach(line IN LISTS lines)
    if(line MATCHES "^#include <(torch/|ATen/ATen\\.h|ATen/Functions\\.h)" AND NOT line MATCHES "torch/version\\.h")
      set(heavy ON)
      break()
    endif()
    if(line MATCHES "^#include \"([^\"]+)\"")
      set(name "${CMAKE_MATCH_1}")
      foreach(dir IN ITEMS "${here}" "${PROJECT_SOURCE_DIR}/include" "${PROJECT_SOURCE_DIR}/src"
                           "${PROJECT_SOURCE_DIR}/tests")
        if(EXISTS "${dir}/${name}")
          _frugal_reaches_torch("${dir}/${name}" inner)
          if(inner)
            set(heavy ON)
          endif()
          break()
        endif()
      endforeach()
      if(heavy)
        break()
      endif()
    endif()
  endforeach()
  set_property(GLOBAL PROPERTY FRUGAL_TORCH_${key} ${heavy})
  set(${out} ${heavy} PARENT_SCOPE)
endfunction()

function(frugal_pch_where_it_pays)
  foreach(src IN LISTS ARGN)
    _frugal_reaches_torch("${src}" heavy)
    if(NOT heavy)
      set_source_files_properties("${src}" PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
    endif()
  endforeach()
endfunction()
