# The stream layer's CUDA target; included by src/stream/CMakeLists.txt when the CUDA backend is on.
# hsdp_stream_cuda: DeviceOps on one GPU (hsdp/stream/cuda/device_ops.hpp): stream-ordered memory and the element
# kernels, over hsdp_quant_cuda's and hsdp_optim_cuda's kernels; the CUDA executor (hsdp/stream/cuda/executor.hpp).
add_library(hsdp_stream_cuda ${CMAKE_CURRENT_LIST_DIR}/device_ops_cuda.cpp ${CMAKE_CURRENT_LIST_DIR}/element_kernels.cu
            ${CMAKE_CURRENT_LIST_DIR}/executor_cuda.cpp)
set_target_properties(hsdp_stream_cuda PROPERTIES CUDA_STANDARD 20 CUDA_STANDARD_REQUIRED ON CUDA_EXTENSIONS OFF)
target_link_libraries(hsdp_stream_cuda PUBLIC hsdp_stream hsdp_quant_cuda hsdp_optim_cuda hsdp_device_cuda
                      PRIVATE hsdp_cuda_warnings)
