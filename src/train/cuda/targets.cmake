# The train layer's CUDA targets; included by src/train/CMakeLists.txt when the CUDA backend is on.

# hsdp_train_cuda: device.type=cuda (hsdp/train/cuda_backend.hpp): the sharding engine with CudaDeviceOps, the CUDA
# executor and GptCuda; needs NCCL too (hsdp_comm_nccl, src/comm/nccl). hsdp_train links it where both are found.
if(HSDP_HAVE_NCCL)
  add_library(hsdp_train_cuda ${CMAKE_CURRENT_LIST_DIR}/engine_backend.cpp)
  target_link_libraries(hsdp_train_cuda PUBLIC hsdp_ckpt hsdp_shard hsdp_optim
                                        PRIVATE hsdp_stream_cuda hsdp_model_cuda hsdp_comm_nccl hsdp_device_select
                                                hsdp_warnings)
endif()
