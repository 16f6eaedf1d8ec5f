# Helpers shared by every frugal target.

# Warnings on; as errors with FRUGAL_WERROR (CI), only where the code is ours (torch headers come
# in as -isystem).
function(frugal_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wno-unused-parameter)
  if(FRUGAL_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
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

# frugal_unity_groups(TARGET SIZE SOURCES...)
# Compiles the target's files in unity groups of at most SIZE files of one source folder: a group
# parses the headers its files share (fmt, json, the standard library; LibTorch's through the
# precompiled header, ~8 s to load) and instantiates their templates once, instead of once per
# file. The files that reach LibTorch's headers (see above) and the others form separate groups,
# so that the others still compile without the precompiled header. Files with their own compile
# options, definitions, flags or include directories compile alone.
# Files of one group share a translation unit: a name with internal linkage (a static or an
# anonymous namespace's) may be defined in only one file of a folder; the ctest
# `unity_internal_names` (tests/layers/check_internal_names.py) checks it. FRUGAL_UNITY=OFF
# compiles every file alone (quicker rebuilds after editing one file).
# The files of FRUGAL_COLD_FOLDERS take FRUGAL_COLD_OPTIONS: on their group's unity source, or on
# the file itself where it compiles alone (its own options, or FRUGAL_UNITY=OFF).
function(frugal_unity_groups target size)
  set(keys "")
  foreach(src IN LISTS ARGN)
    get_filename_component(dir "${src}" DIRECTORY)
    file(RELATIVE_PATH rel "${PROJECT_SOURCE_DIR}" "${dir}")
    set(cold OFF)
    if(FRUGAL_COLD_OPTIONS AND rel IN_LIST FRUGAL_COLD_FOLDERS)
      set(cold ON)
    endif()
    # CMake compiles such files alone whatever their group (and so must they be counted out)
    set(own "")
    foreach(prop IN ITEMS COMPILE_OPTIONS COMPILE_DEFINITIONS COMPILE_FLAGS INCLUDE_DIRECTORIES
                          SKIP_UNITY_BUILD_INCLUSION)
      get_source_file_property(value "${src}" ${prop})
      if(value)
        set(own ON)
      endif()
    endforeach()
    if(own OR NOT FRUGAL_UNITY)
      if(cold)
        set_property(SOURCE "${src}" APPEND PROPERTY COMPILE_OPTIONS "${FRUGAL_COLD_OPTIONS}")
      endif()
      continue()
    endif()
    _frugal_reaches_torch("${src}" heavy)
    string(MAKE_C_IDENTIFIER "${rel}" key)
    if(NOT heavy)
      string(APPEND key "_light")
    endif()
    if(NOT key IN_LIST keys)
      list(APPEND keys ${key})
      set(files_${key} "")
      set(rel_${key} "${rel}")
    endif()
    list(APPEND files_${key} "${src}")
  endforeach()
  foreach(key IN LISTS keys)
    list(SORT files_${key})
    list(LENGTH files_${key} n)
    # ceil(n / size) groups of near-equal size, in name order
    math(EXPR groups "(${n} + ${size} - 1) / ${size}")
    set(i 0)
    foreach(src IN LISTS files_${key})
      math(EXPR g "${i} * ${groups} / ${n}")
      set_source_files_properties("${src}" PROPERTIES UNITY_GROUP "${key}_${g}")
      math(EXPR i "${i} + 1")
    endforeach()
    if(FRUGAL_COLD_OPTIONS AND rel_${key} IN_LIST FRUGAL_COLD_FOLDERS)
      math(EXPR last "${groups} - 1")
      foreach(g RANGE ${last})
        set_source_files_properties(
          "${CMAKE_CURRENT_BINARY_DIR}/CMakeFiles/${target}.dir/Unity/unity_${key}_${g}_cxx.cxx"
          PROPERTIES COMPILE_OPTIONS "${FRUGAL_COLD_OPTIONS}")
      endforeach()
    endif()
    if(FRUGAL_PCH AND key MATCHES "_light$")
      # A unity source takes the target's precompiled header unless marked itself (CMake names
      # it <target>.dir/Unity/unity_<group>_cxx.cxx; under another name the group just takes the
      # header, a few seconds slower).
      math(EXPR last "${groups} - 1")
      foreach(g RANGE ${last})
        set_source_files_properties(
          "${CMAKE_CURRENT_BINARY_DIR}/CMakeFiles/${target}.dir/Unity/unity_${key}_${g}_cxx.cxx"
          PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
      endforeach()
    endif()
  endforeach()
  if(FRUGAL_UNITY)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_MODE GROUP)
  endif()
endfunction()
