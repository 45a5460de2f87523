# hsdp-bench-train-gpu (train_gpu.cpp): GPU training throughput and MFU of GPT-2 124M through the sharding engine.
# Included by tools/bench/CMakeLists.txt with `include(train_gpu.cmake)`; tools/bench/train_gpu.sh builds and runs it.
# Needs the CUDA backend with NCCL (HSDP_HAVE_CUDA, HSDP_HAVE_NCCL, see cmake/cuda.cmake); without it nothing is defined.
if(NOT TARGET hsdp_warnings)
  # Injected by train_gpu.sh as CMAKE_PROJECT_hsdp_INCLUDE (before the top level has set anything up, while
  # tools/bench/CMakeLists.txt lacks the include): come back at the end of the top-level directory.
  cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL include ${CMAKE_SOURCE_DIR}/tools/bench/train_gpu.cmake)
  return()
endif()
if(TARGET hsdp-bench-train-gpu OR NOT HSDP_HAVE_CUDA OR NOT HSDP_HAVE_NCCL)
  return()
endif()
add_executable(hsdp-bench-train-gpu ${CMAKE_CURRENT_LIST_DIR}/train_gpu.cpp)
set_target_properties(hsdp-bench-train-gpu PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
# The CUDA targets are declared in the layers' folders (src/<layer>/cuda/targets.cmake, see cmake/cuda.cmake).
target_link_libraries(hsdp-bench-train-gpu PRIVATE hsdp_train hsdp_app hsdp_device_cuda Boost::program_options
                                                   hsdp_warnings)
