# Small helpers so that every CMakeLists.txt stays a few lines.
#
#   h3pipe_add_library(NAME SOURCES a.cpp b.cpp DEPS h3pipe::core PRIVATE_DEPS spdlog::spdlog)
#       -> target h3pipe_NAME, alias h3pipe::NAME, include root = repository root
#   h3pipe_add_service(NAME SOURCES main.cpp DEPS ...)      -> executable h3pipe-NAME
#   h3pipe_add_test(NAME LABELS unit SOURCES x_test.cpp DEPS ...)
#       -> gtest executable NAME registered with ctest under LABELS (a GTEST_SKIP: ctest skip)

function(h3pipe_add_library name)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(h3pipe_${name} STATIC ${A_SOURCES})
  add_library(h3pipe::${name} ALIAS h3pipe_${name})
  target_include_directories(h3pipe_${name} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_link_libraries(h3pipe_${name} PUBLIC ${A_DEPS} PRIVATE ${A_PRIVATE_DEPS})
  set_target_properties(h3pipe_${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
endfunction()

function(h3pipe_add_service name)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(h3pipe-${name} ${A_SOURCES})
  target_link_libraries(h3pipe-${name} PRIVATE ${A_DEPS})
  set_target_properties(h3pipe-${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
endfunction()

# The main() of every test binary (tests/support/gtest_main.cpp), made once.
function(h3pipe_gtest_main_target)
  if(NOT TARGET h3pipe_gtest_main)
    add_library(h3pipe_gtest_main STATIC ${PROJECT_SOURCE_DIR}/tests/support/gtest_main.cpp)
    target_link_libraries(h3pipe_gtest_main PUBLIC GTest::gtest)
    h3pipe_test_pch(h3pipe_gtest_main)
    h3pipe_test_opt(h3pipe_gtest_main)  # -O1 for the tests' own code (cmake/H3pipeBuildTime.cmake)
    # GCC 12 at -O2: libstdc++'s char_traits memcpy gives false -Warray-bounds and
    # -Wstringop-overflow in a few tests (the same family as the top-level -Wno-restrict); at -O1
    # a false -Wfree-nonheap-object on a moved-from local Result (comfyui_split_test).
    target_compile_options(h3pipe_gtest_main PUBLIC
      $<$<AND:$<CXX_COMPILER_ID:GNU>,$<VERSION_LESS:$<CXX_COMPILER_VERSION>,13>>:-Wno-array-bounds;-Wno-stringop-overflow;-Wno-free-nonheap-object>)
  endif()
endfunction()

function(h3pipe_add_test name)
  # SERIAL: the test measures time, so ctest -j runs it alone.
  cmake_parse_arguments(A "SERIAL" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  # main(): tests/support/gtest_main.cpp, not GTest::gtest_main: a GTEST_SKIP exits 77 (when
  # nothing failed) with an "H3PIPE_SKIP: Suite.Name: reason" line per skipped test, and
  # SKIP_RETURN_CODE below makes that a ctest skip (scripts/test.sh lists them).
  h3pipe_gtest_main_target()
  add_executable(${name} ${A_SOURCES})
  target_link_libraries(${name} PRIVATE ${A_DEPS} GTest::gtest h3pipe_gtest_main)
  if(H3PIPE_TEST_PCH)
    target_precompile_headers(${name} REUSE_FROM h3pipe_gtest_main)
  endif()
  target_compile_definitions(${name} PRIVATE
    H3PIPE_BIN_DIR="${PROJECT_BINARY_DIR}/bin"
    H3PIPE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  # One file each, mostly; the few with several keep them apart (cmake/H3pipeBuildTime.cmake).
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests
    UNITY_BUILD OFF)
  add_test(NAME ${name} COMMAND ${name})
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 300)
  endif()
  set_tests_properties(${name} PROPERTIES LABELS "${A_LABELS}" TIMEOUT ${A_TIMEOUT}
    SKIP_RETURN_CODE 77)
  if(A_SERIAL)
    set_tests_properties(${name} PROPERTIES RUN_SERIAL TRUE)
  endif()
endfunction()
