#include "hsdp/device/blas_info.hpp"

#include <unistd.h>

#include <array>
#include <cctype>
#include <cstdlib>
#include <string_view>

extern "C" {
char* openblas_get_corename(void);
char* openblas_get_config(void);
}

namespace hsdp::device {

std::string blas_core_name() { return openblas_get_corename(); }
std::string blas_config() { return openblas_get_config(); }

std::string recommended_blas_coretype() {
  // OpenBLAS core names (lower case, as openblas_get_corename prints them) with neither AVX2 nor AVX-512.
  constexpr std::array<std::string_view, 11> kPreAvx2 = {"prescott", "core2",     "penryn", "dunnington",
                                                          "nehalem",  "atom",      "sandybridge", "katmai",
                                                          "coppermine", "northwood", "banias"};
  std::string core = blas_core_name();
  for (char& ch : core) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  bool outdated = false;
  for (const std::string_view name : kPreAvx2) outdated = outdated || core == name;
  if (!outdated) return "";
  __builtin_cpu_init();
  // OpenBLAS's SkylakeX kernels use AVX-512 F, BW, DQ and VL.
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl")) {
    return "SkylakeX";
  }
  if (__builtin_cpu_supports("avx2")) return "Haswell";
  return "";
}

void reexec_with_blas_coretype_if_needed(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;  // set by the user, or by the previous exec
  const std::string coretype = recommended_blas_coretype();
  if (coretype.empty()) return;
  if (setenv("OPENBLAS_CORETYPE", coretype.c_str(), 1) != 0) return;
  execv("/proc/self/exe", argv);
  // exec failed: go on with the slow kernels rather than not at all.
}

}  // namespace hsdp::device
