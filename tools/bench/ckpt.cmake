# hsdp-bench-ckpt (ckpt_bench.cpp): checkpoint write/read bandwidth. Included by tools/bench/CMakeLists.txt with
# `include(ckpt.cmake)`; tools/bench/ckpt.sh builds and runs it next to dd.
if(NOT TARGET hsdp_warnings)
  # Injected by ckpt.sh as CMAKE_PROJECT_hsdp_INCLUDE (before the top level has set anything up, while
  # tools/bench/CMakeLists.txt lacks the include): come back at the end of the top-level directory.
  cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL include ${CMAKE_SOURCE_DIR}/tools/bench/ckpt.cmake)
  return()
endif()
if(TARGET hsdp-bench-ckpt)
  return()
endif()
add_executable(hsdp-bench-ckpt ${CMAKE_CURRENT_LIST_DIR}/ckpt_bench.cpp)
target_link_libraries(hsdp-bench-ckpt PRIVATE hsdp_ckpt Boost::program_options hsdp_warnings)
set_target_properties(hsdp-bench-ckpt PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
