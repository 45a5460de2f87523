# The CUDA backend (GPU path): HSDP_CUDA = AUTO | ON | OFF.
#   AUTO  builds it when nvcc is found (check_language(CUDA)), and NCCL's comm backend when nccl.h and libnccl are.
#   ON    requires nvcc, the CUDA toolkit (cudart, cuBLAS, cuBLASLt) and NCCL: a missing one is a FATAL_ERROR.
#   OFF   skips it.
# Included by the top-level CMakeLists.txt right after HSDP_CUDA is declared, before any layer: it enables the
# CUDA language and says what the build has. Each layer declares its CUDA targets in src/<layer>/cuda/targets.cmake,
# included from the layer's CMakeLists.txt (comm's NCCL code: src/comm/nccl/targets.cmake), linked only downwards:
#   HSDP_HAVE_CUDA / HSDP_HAVE_NCCL   ON or OFF (CMake variables; targets see HSDP_HAVE_CUDA=1 as a definition)
#   src/device       hsdp_device_select     hsdp::device::select_device and DeviceType: always built, with or without CUDA
#   src/device/cuda  hsdp_cuda_warnings     the warning flags of CUDA targets (CXX: hsdp_warnings'; CUDA: errors with HSDP_WERROR)
#                    hsdp_device_cuda       RAII CUDA handles, cuBLASLt GEMMs, the kernels' shared helpers
#   src/quant/cuda   hsdp_quant_cuda        block-wise quantization kernels
#   src/model/cuda   hsdp_model_cuda        the GPT layers' kernels and GEMM layers, the GPT on one GPU
#   src/optim/cuda   hsdp_optim_cuda        AdamW and the squared gradient norm on the GPU
#   src/stream/cuda  hsdp_stream_cuda       DeviceOps on one GPU (the engine's device interface)
#   src/train/cuda   hsdp_train_cuda        the device.type=cuda training backend (needs NCCL)
#   src/comm/nccl    hsdp_comm_nccl         NcclCommunicator and make_inter_node_communicator (needs NCCL)
# GPU architectures: CMAKE_CUDA_ARCHITECTURES, by default "90;80-virtual" (H100/H200 code plus PTX that the
# driver compiles for A100 and newer). Set it on the command line for other cards, e.g. -DCMAKE_CUDA_ARCHITECTURES=80.
include_guard(GLOBAL)
include(CheckLanguage)

string(TOUPPER "${HSDP_CUDA}" _hsdp_cuda_mode)
if(NOT _hsdp_cuda_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "HSDP_CUDA must be AUTO, ON or OFF, got '${HSDP_CUDA}'")
endif()

set(HSDP_HAVE_CUDA OFF)
set(HSDP_HAVE_NCCL OFF)

# Says why CUDA is off (AUTO) or stops the configuration (ON).
macro(_hsdp_cuda_unavailable reason)
  if(_hsdp_cuda_mode STREQUAL "ON")
    message(FATAL_ERROR "HSDP_CUDA=ON: ${reason}")
  endif()
  message(STATUS "CUDA backend: off (${reason})")
endmacro()

if(_hsdp_cuda_mode STREQUAL "OFF")
  message(STATUS "CUDA backend: off (HSDP_CUDA=OFF)")
elseif(HSDP_SANITIZE)
  # The sanitizer flags are added for every language and nvcc does not take them.
  _hsdp_cuda_unavailable("the sanitizer build (HSDP_SANITIZE=ON) does not build CUDA code; use HSDP_CUDA=OFF there")
else()
  # nvcc on PATH, CUDACXX, or the toolkit's usual place (the `cuda` preset's /usr/local/cuda).
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    find_program(HSDP_NVCC nvcc PATHS /usr/local/cuda/bin NO_CACHE)
    if(HSDP_NVCC)
      set(ENV{CUDACXX} "${HSDP_NVCC}")
    endif()
  endif()
  check_language(CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    _hsdp_cuda_unavailable("nvcc not found: put it on PATH, set CUDACXX, or install the CUDA toolkit in /usr/local/cuda")
  else()
    if(NOT DEFINED CMAKE_CUDA_HOST_COMPILER)
      set(CMAKE_CUDA_HOST_COMPILER "${CMAKE_CXX_COMPILER}" CACHE FILEPATH "Host compiler nvcc uses")
    endif()
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES "90;80-virtual" CACHE STRING
          "GPU architectures: SASS for H100/H200 (90) and PTX for A100 and newer (80-virtual)")
    endif()
    enable_language(CUDA)
    # CUDA sources take the CXX_STANDARD (20) when CUDA_STANDARD is unset, but CMake 3.25 does not know nvcc's
    # C++20 flag (nvcc has it since 12.0): teach it, or every target with .cu files fails to generate.
    if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_COMPILE_FEATURES cuda_std_20)
      list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
    endif()
    find_package(CUDAToolkit)
    if(NOT CUDAToolkit_FOUND OR NOT TARGET CUDA::cublasLt OR NOT TARGET CUDA::cudart)
      _hsdp_cuda_unavailable("nvcc found at ${CMAKE_CUDA_COMPILER} but not the CUDA toolkit's cudart/cuBLASLt")
    else()
      set(HSDP_HAVE_CUDA ON)
      find_path(HSDP_NCCL_INCLUDE_DIR nccl.h
                HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME ENV NCCL_ROOT PATH_SUFFIXES include)
      find_library(HSDP_NCCL_LIBRARY nccl
                   HINTS ${CUDAToolkit_LIBRARY_DIR} ENV NCCL_HOME ENV NCCL_ROOT PATH_SUFFIXES lib lib64)
      if(HSDP_NCCL_INCLUDE_DIR AND HSDP_NCCL_LIBRARY)
        set(HSDP_HAVE_NCCL ON)
        add_library(hsdp::nccl UNKNOWN IMPORTED GLOBAL)
        set_target_properties(hsdp::nccl PROPERTIES IMPORTED_LOCATION "${HSDP_NCCL_LIBRARY}"
                                                    INTERFACE_INCLUDE_DIRECTORIES "${HSDP_NCCL_INCLUDE_DIR}")
      elseif(_hsdp_cuda_mode STREQUAL "ON")
        message(FATAL_ERROR "HSDP_CUDA=ON: NCCL not found (nccl.h, libnccl); install it next to the CUDA toolkit "
                            "or point NCCL_HOME at it")
      else()
        message(STATUS "CUDA backend: NCCL not found (nccl.h, libnccl): hsdp_comm_nccl is not built")
      endif()
      message(STATUS "CUDA backend: on (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures "
                     "${CMAKE_CUDA_ARCHITECTURES}, NCCL ${HSDP_HAVE_NCCL})")
    endif()
  endif()
endif()

# For scripts (tools/bench/train_gpu.sh): whether this build directory has the CUDA backend.
set(HSDP_CUDA_BACKEND ${HSDP_HAVE_CUDA} CACHE INTERNAL "ON when this build has the CUDA backend")
