#include "hsdp/device/threads.hpp"

#include <cblas.h>
#include <omp.h>
#include <sched.h>

#include <string>

#include "hsdp/core/error.hpp"

namespace hsdp::device {
namespace {

void check_positive(int threads, const char* pool) {
  if (threads < 1) {
    throw_internal(std::string("thread count for ") + pool + " must be >= 1, got " + std::to_string(threads));
  }
}

}  // namespace

int blas_threads() { return openblas_get_num_threads(); }
int omp_threads() { return omp_get_max_threads(); }

void set_blas_threads(int threads) {
  check_positive(threads, "OpenBLAS");
  openblas_set_num_threads(threads);
}

void set_omp_threads(int threads) {
  check_positive(threads, "OpenMP");
  omp_set_num_threads(threads);
}

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  const int n = CPU_COUNT(&set);
  return n > 0 ? n : 1;
}

ThreadCountScope::ThreadCountScope(int blas, int omp)
    : previous_blas_(blas_threads()), previous_omp_(omp_threads()) {
  check_positive(blas, "OpenBLAS");
  check_positive(omp, "OpenMP");
  set_blas_threads(blas);
  set_omp_threads(omp);
}

ThreadCountScope::~ThreadCountScope() {
  openblas_set_num_threads(previous_blas_);
  omp_set_num_threads(previous_omp_);
}

}  // namespace hsdp::device
