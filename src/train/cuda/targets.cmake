# Included by cmake/cuda.cmake at the end of the top-level directory when CUDA and NCCL are found.
# hsdp_train_cuda: the device.type=cuda training backend (hsdp/train/cuda_backend.hpp); hsdp_train links it.
add_library(hsdp_train_cuda ${CMAKE_CURRENT_LIST_DIR}/backend.cpp)
target_link_libraries(hsdp_train_cuda PUBLIC hsdp_ckpt hsdp_shard hsdp_optim PRIVATE hsdp_model_cuda hsdp_comm_nccl
                                                                             hsdp_device_select hsdp_warnings)
