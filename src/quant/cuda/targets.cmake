# The quant layer's CUDA target; included by src/quant/CMakeLists.txt when the CUDA backend is on.
# hsdp_quant_cuda: block-wise int8/int4 quantize, dequantize and dequantize-accumulate on the GPU
# (hsdp/quant/cuda/blockwise.hpp), bit-exact to hsdp_quant and sized by its QuantSpec.
add_library(hsdp_quant_cuda ${CMAKE_CURRENT_LIST_DIR}/blockwise.cu)
set_target_properties(hsdp_quant_cuda PROPERTIES CUDA_STANDARD 20 CUDA_STANDARD_REQUIRED ON CUDA_EXTENSIONS OFF)
target_link_libraries(hsdp_quant_cuda PUBLIC hsdp_quant hsdp_device_cuda PRIVATE hsdp_cuda_warnings)
