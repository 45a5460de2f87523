# The device layer's CUDA targets; included by src/device/CMakeLists.txt (source paths are relative to this file).

if(NOT HSDP_HAVE_CUDA)
  return()
endif()

# Warnings are errors in CUDA targets too: C++ files get hsdp_warnings' flags; .cu files get nvcc's warnings as
# errors and the host compiler's -Wall -Wextra -Werror on their host code (not -Wpedantic, which nvcc's generated
# host stubs do not pass). Every layer's CUDA target links it privately.
add_library(hsdp_cuda_warnings INTERFACE)
target_compile_options(hsdp_cuda_warnings INTERFACE
  "$<$<COMPILE_LANGUAGE:CXX>:$<TARGET_PROPERTY:hsdp_warnings,INTERFACE_COMPILE_OPTIONS>>"
  # ptxas warns of a kernel whose registers spill to local memory (an error with HSDP_WERROR): the tensor-core
  # attention keeps each warp's operands and accumulators in registers across its tiles, and a spill would make it
  # slow without a failing test (none spills today: 252 registers at most, dK/dV at head size 128).
  "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra;-Xptxas=-warn-spills>"
  "$<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${HSDP_WERROR}>>:-Werror=all-warnings;-Xcompiler=-Werror>")

# hsdp_device_cuda: the CUDA runtime in RAII (runtime.hpp), cuBLASLt GEMMs (blas.hpp), the stream-spinning test
# kernel, and kernel_util.cuh, the device helpers the other layers' kernels include. The kernels themselves live
# with their layers: hsdp_quant_cuda (src/quant/cuda), hsdp_model_cuda (src/model/cuda), hsdp_optim_cuda
# (src/optim/cuda).
set(_hsdp_device_cuda_sources runtime.cpp blas.cpp spin.cu)
list(TRANSFORM _hsdp_device_cuda_sources PREPEND ${CMAKE_CURRENT_LIST_DIR}/)
add_library(hsdp_device_cuda ${_hsdp_device_cuda_sources})
set_target_properties(hsdp_device_cuda PROPERTIES CUDA_STANDARD 20 CUDA_STANDARD_REQUIRED ON CUDA_EXTENSIONS OFF)
target_compile_definitions(hsdp_device_cuda PUBLIC HSDP_HAVE_CUDA=1)
target_link_libraries(hsdp_device_cuda PUBLIC hsdp_core CUDA::cudart PRIVATE CUDA::cublasLt hsdp_cuda_warnings)

target_link_libraries(hsdp_device_select PRIVATE hsdp_device_cuda)
