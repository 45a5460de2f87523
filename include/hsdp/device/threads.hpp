#pragma once
// Thread counts of the two CPU thread pools hsdp uses: OpenBLAS's (GEMM) and OpenMP's (every other loop).
// ThreadCountScope sets both for its lifetime and restores the previous counts when it ends, so a test or
// a benchmark never leaks its setting into the next one.
namespace hsdp::device {

int blas_threads();
int omp_threads();
void set_blas_threads(int threads);
void set_omp_threads(int threads);
// Cores this process may run on (the affinity mask), at least 1.
int available_cores();

class ThreadCountScope {
 public:
  // Both pools get `threads` (>= 1).
  explicit ThreadCountScope(int threads) : ThreadCountScope(threads, threads) {}
  ThreadCountScope(int blas, int omp);
  ~ThreadCountScope();
  ThreadCountScope(const ThreadCountScope&) = delete;
  ThreadCountScope& operator=(const ThreadCountScope&) = delete;

 private:
  int previous_blas_;
  int previous_omp_;
};

}  // namespace hsdp::device
