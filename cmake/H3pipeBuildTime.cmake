# What a build costs (issue #40 item 5): measured with scripts/bench.sh build.
#
# Unity batches: every target that has several C++ sources (the libraries, the CLI, benches)
# compiles them H3PIPE_UNITY_BATCH at a time in one translation unit, so the heavy headers they all
# include (nlohmann/json, fmt/spdlog, protobuf, hiredis) are parsed, and their templates
# instantiated and optimized, once per batch instead of once per file.  Tests are single files
# (h3pipe_add_test turns it off for the few that are not).  A source that cannot share a batch (a
# name in an anonymous namespace that another file of the target also defines) gets
#   set_source_files_properties(x.cpp PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
# or better a distinct name.  -DH3PIPE_UNITY_BUILD=OFF compiles file by file (what an IDE or a
# one-file edit loop may prefer).
option(H3PIPE_UNITY_BUILD "Compile the sources of each library and of the CLI in unity batches" ON)
set(H3PIPE_UNITY_BATCH 8 CACHE STRING "Sources per unity batch (H3PIPE_UNITY_BUILD)")
set(CMAKE_UNITY_BUILD ${H3PIPE_UNITY_BUILD})
set(CMAKE_UNITY_BUILD_BATCH_SIZE ${H3PIPE_UNITY_BATCH})
# In a batch a .cpp is no longer the main file, so GCC warns of every class of it that has a member
# of an anonymous-namespace type (-Wsubobject-linkage, meant for headers): nine false warnings.
if(H3PIPE_UNITY_BUILD AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-Wno-subobject-linkage>)
endif()

# h3pipe_unity_off(TARGET...): those targets compile file by file.
function(h3pipe_unity_off)
  foreach(t ${ARGN})
    if(TARGET ${t})
      set_target_properties(${t} PROPERTIES UNITY_BUILD OFF)
    endif()
  endforeach()
endfunction()

# ccache when installed (CCACHE_DISABLE=1 turns it off for one build), unless a launcher is set.
option(H3PIPE_CCACHE "Compile through ccache when it is installed" ON)
if(H3PIPE_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  find_program(H3PIPE_CCACHE_PROGRAM ccache)
  if(H3PIPE_CCACHE_PROGRAM)
    set(CMAKE_C_COMPILER_LAUNCHER ${H3PIPE_CCACHE_PROGRAM})
    set(CMAKE_CXX_COMPILER_LAUNCHER ${H3PIPE_CCACHE_PROGRAM})
    message(STATUS "h3pipe: compiling through ${H3PIPE_CCACHE_PROGRAM}")
  endif()
endif()

# -O2 for Release.  Where the time is spent at run time (the builtin model, the latent codec,
# transfer, media and their benchmarks: h3pipe_hot, called after every target is made) the code is
# compiled exactly as before: -O3, file by file, so those objects are the same as without this file.
option(H3PIPE_O2 "Release: -O2, and -O3 only for the hot libraries" ON)
if(H3PIPE_O2)
  string(REPLACE "-O3" "-O2" CMAKE_C_FLAGS_RELEASE "${CMAKE_C_FLAGS_RELEASE}")
  string(REPLACE "-O3" "-O2" CMAKE_CXX_FLAGS_RELEASE "${CMAKE_CXX_FLAGS_RELEASE}")
endif()
function(h3pipe_hot)
  foreach(t ${ARGN})
    if(NOT TARGET ${t})
      continue()
    endif()
    set_target_properties(${t} PROPERTIES UNITY_BUILD OFF)
    if(H3PIPE_O2)
      target_compile_options(${t} PRIVATE $<$<AND:$<CONFIG:Release>,$<COMPILE_LANGUAGE:C,CXX>>:-O3>)
    endif()
  endforeach()
endfunction()

# The tests' own code (their bodies, helpers and main(), not the libraries they test: those are
# compiled as above) at H3PIPE_TEST_OPT in Release: -O1 by default.  Half of a test's compile time
# is GCC optimising its GoogleTest bodies at -O2: the 134 test objects and their PCH took 824 s
# at -O2, 591 s at -O1 (sums of their .ninja_log edge times, -j2 on 2 cores; #40); the run time
# of the tests did not change.
# Empty: the tests as the build type says (-O2).
set(H3PIPE_TEST_OPT -O1 CACHE STRING "Release: optimisation of the tests' own code (empty: as the build type)")
function(h3pipe_test_opt holder)
  if(H3PIPE_TEST_OPT)
    target_compile_options(${holder} PUBLIC $<$<AND:$<CONFIG:Release>,$<COMPILE_LANGUAGE:CXX>>:${H3PIPE_TEST_OPT}>)
  endif()
endfunction()

# h3pipe_unity_apart(DIR FILE...): FILEs of the target(s) in DIR (relative to the repository root)
# compile alone, outside the unity batches: each defines a name in an anonymous namespace that
# another file of its target also defines (a clash once they share a translation unit).
function(h3pipe_unity_apart dir)
  foreach(f ${ARGN})
    set_source_files_properties(${PROJECT_SOURCE_DIR}/${dir}/${f} DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}
      PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
  endforeach()
endfunction()

# One precompiled header for every test (h3pipe_add_test: REUSE_FROM h3pipe_gtest_main): what
# nearly all of them include, GoogleTest, nlohmann/json, fmt and the standard library, parsed once
# instead of in each of 150 test files.  GCC takes a precompiled header only where the macros it
# mentions are defined alike, so its holder hands the definitions it was made with (FMT_SHARED,
# _FILE_OFFSET_BITS=64, a no-op on 64-bit Linux that libav's flags add to some tests) to every
# test; -Winvalid-pch (CMake's) would warn where one is not taken.
option(H3PIPE_TEST_PCH "Tests share one precompiled header" ON)
function(h3pipe_test_pch holder)
  if(NOT H3PIPE_TEST_PCH)
    return()
  endif()
  target_link_libraries(${holder} PUBLIC fmt::fmt nlohmann_json::nlohmann_json)
  target_compile_definitions(${holder} PUBLIC _FILE_OFFSET_BITS=64)
  target_precompile_headers(${holder} PRIVATE <gtest/gtest.h> <nlohmann/json.hpp> <fmt/format.h>
    <algorithm> <atomic> <chrono> <filesystem> <fstream> <functional> <map> <memory> <optional>
    <set> <sstream> <string> <thread> <vector>)
endfunction()

# The linker of every C and C++ link: lld, else gold (binutils), else the compiler's default (GNU
# ld), whichever the compiler accepts with -fuse-ld= (checked once per build directory).  Every
# test, bench and service links up to 30 static libraries and a dozen shared ones: ~135 links
# in a build of every target.  CPU (user+sys) of one link, five of them measured (#40): GNU ld
# 0.33-0.76 s, gold 0.10-0.21 s, lld 0.07-0.12 s.  scripts/setup.sh installs lld with the test
# packages; gold comes with binutils.  Links that nvcc drives (none today: CUDA code is linked by
# the C++ compiler) keep their default.  -DH3PIPE_LINKER=lld|gold requires that one, =default
# leaves the compiler's choice.
set(H3PIPE_LINKER auto CACHE STRING "Linker for C/C++ links: auto (lld, else gold, else default), lld, gold, default")
set_property(CACHE H3PIPE_LINKER PROPERTY STRINGS auto lld gold default)
if(H3PIPE_LINKER STREQUAL "auto")
  set(_h3pipe_linkers lld gold)
elseif(H3PIPE_LINKER MATCHES "^(lld|gold)$")
  set(_h3pipe_linkers ${H3PIPE_LINKER})
elseif(H3PIPE_LINKER STREQUAL "default")
  set(_h3pipe_linkers)
else()
  message(FATAL_ERROR "H3PIPE_LINKER must be auto, lld, gold or default, not '${H3PIPE_LINKER}'")
endif()
include(CheckLinkerFlag)
set(H3PIPE_LINKER_USED default)
foreach(_l ${_h3pipe_linkers})
  check_linker_flag(CXX -fuse-ld=${_l} H3PIPE_LINKER_HAS_${_l})
  if(H3PIPE_LINKER_HAS_${_l})
    set(H3PIPE_LINKER_USED ${_l})
    break()
  endif()
endforeach()
if(NOT H3PIPE_LINKER MATCHES "^(auto|default)$" AND H3PIPE_LINKER_USED STREQUAL "default")
  message(FATAL_ERROR "H3PIPE_LINKER=${H3PIPE_LINKER}: ${CMAKE_CXX_COMPILER} does not link with "
                      "-fuse-ld=${H3PIPE_LINKER} (install it, or -DH3PIPE_LINKER=auto)")
endif()
if(NOT H3PIPE_LINKER_USED STREQUAL "default")
  add_link_options($<$<LINK_LANGUAGE:C,CXX>:-fuse-ld=${H3PIPE_LINKER_USED}>)
endif()
message(STATUS "h3pipe: linking with ${H3PIPE_LINKER_USED} (H3PIPE_LINKER=${H3PIPE_LINKER})")
