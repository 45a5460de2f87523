# Included by cmake/cuda.cmake at the end of the top-level directory when the CUDA backend is on.
# hsdp_model_cuda: the GPT forward and backward on one GPU (hsdp/model/cuda/gpt.hpp), over hsdp_device_cuda.
add_library(hsdp_model_cuda ${CMAKE_CURRENT_LIST_DIR}/gpt.cpp)
target_link_libraries(hsdp_model_cuda PUBLIC hsdp_model hsdp_device_cuda PRIVATE hsdp_warnings)
