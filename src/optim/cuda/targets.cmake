# The optim layer's CUDA target; included by src/optim/CMakeLists.txt when the CUDA backend is on.
# hsdp_optim_cuda: AdamW over optim::DecaySegment and the squared gradient norm on the GPU
# (hsdp/optim/cuda/adamw.hpp), the math of hsdp_optim's adamw_update.
add_library(hsdp_optim_cuda ${CMAKE_CURRENT_LIST_DIR}/adamw.cu)
set_target_properties(hsdp_optim_cuda PROPERTIES CUDA_STANDARD 20 CUDA_STANDARD_REQUIRED ON CUDA_EXTENSIONS OFF)
target_link_libraries(hsdp_optim_cuda PUBLIC hsdp_optim hsdp_device_cuda PRIVATE hsdp_cuda_warnings)
