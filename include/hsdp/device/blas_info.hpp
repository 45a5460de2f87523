#pragma once
// Which OpenBLAS kernels this process runs, and a remedy when they are the wrong ones.
//
// Debian's OpenBLAS 0.3.21 is a DYNAMIC_ARCH build that picks its kernels from the CPU model number. On a
// CPU newer than the library (e.g. an Emerald Rapids Xeon, model 207, under KVM) it falls back to the
// Prescott (SSE3) kernels: SGEMM at ~25 instead of ~130 GFLOP/s per core. The environment variable
// OPENBLAS_CORETYPE, read when the library loads, selects the kernels instead.
#include <string>

namespace hsdp::device {

std::string blas_core_name();  // e.g. "SkylakeX", "Haswell", "Prescott"
std::string blas_config();     // OpenBLAS's build description

// The OPENBLAS_CORETYPE that fits this CPU ("SkylakeX" with AVX-512, "Haswell" with AVX2) when OpenBLAS
// runs pre-AVX2 kernels on a CPU that has better ones; "" when its choice is fine.
std::string recommended_blas_coretype();

// When recommended_blas_coretype() is not "" and OPENBLAS_CORETYPE is unset: sets it and re-executes the
// program (/proc/self/exe with the same argv) so that OpenBLAS loads with it. Call first thing in main,
// before MPI_Init or any thread starts. Returns when nothing is needed or exec is impossible.
void reexec_with_blas_coretype_if_needed(char** argv);

}  // namespace hsdp::device
