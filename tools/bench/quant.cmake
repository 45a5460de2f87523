# hsdp-bench-quant (quant_bench.cpp): quantization throughput vs memcpy. Included by tools/bench/CMakeLists.txt
# with `include(quant.cmake)`; tools/bench/quant.sh builds and runs it.
if(NOT TARGET hsdp_warnings)
  # Injected by quant.sh as CMAKE_PROJECT_hsdp_INCLUDE (before the top level has set anything up, while
  # tools/bench/CMakeLists.txt lacks the include): come back at the end of the top-level directory.
  cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL include ${CMAKE_SOURCE_DIR}/tools/bench/quant.cmake)
  return()
endif()
if(TARGET hsdp-bench-quant)
  return()
endif()
add_executable(hsdp-bench-quant ${CMAKE_CURRENT_LIST_DIR}/quant_bench.cpp)
target_link_libraries(hsdp-bench-quant PRIVATE hsdp_quant OpenMP::OpenMP_CXX Boost::program_options hsdp_warnings)
set_target_properties(hsdp-bench-quant PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
