# The model layer's CUDA target; included by src/model/CMakeLists.txt when the CUDA backend is on.
# hsdp_model_cuda: the GPT layers on the GPU (hsdp/model/cuda/layers.hpp: kernels, and the GEMM layers over
# hsdp_device_cuda's cuBLASLt) and the GPT forward and backward on one GPU (hsdp/model/cuda/gpt.hpp).
set(_hsdp_model_cuda_sources layers.cu attention.cu flash_attention.cu softmax_xent.cu matmul.cpp gpt.cpp
                             kernel_timer.cpp)
list(TRANSFORM _hsdp_model_cuda_sources PREPEND ${CMAKE_CURRENT_LIST_DIR}/)
add_library(hsdp_model_cuda ${_hsdp_model_cuda_sources})
set_target_properties(hsdp_model_cuda PROPERTIES CUDA_STANDARD 20 CUDA_STANDARD_REQUIRED ON CUDA_EXTENSIONS OFF)
target_link_libraries(hsdp_model_cuda PUBLIC hsdp_model hsdp_device_cuda PRIVATE hsdp_cuda_warnings)
