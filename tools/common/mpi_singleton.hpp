#pragma once
// The MPI process of a tool that reads and writes checkpoints alone, on MPI_COMM_SELF (hsdp-ckpt, hsdp-sample):
// parallel HDF5 needs MPI started, but the tool is one process. Started as several ranks (mpirun -np N, srun -n N),
// every rank would run the whole command, print every message and race the others on the same OUT.tmp; alone()
// says so once, on rank 0, and the caller exits 2 on every rank.
#include <mpi.h>

#include <iostream>

namespace hsdp::tool {

class MpiSingleton {
 public:
  // `start` false (--help, --version, a command that needs no MPI): nothing is started, and alone() is true.
  explicit MpiSingleton(bool start) : started_(start) {
    if (started_) MPI_Init(nullptr, nullptr);
  }
  ~MpiSingleton() {
    if (started_) MPI_Finalize();
  }
  MpiSingleton(const MpiSingleton&) = delete;
  MpiSingleton& operator=(const MpiSingleton&) = delete;

  // Whether this process is the whole MPI world; if not, rank 0 has printed one line saying so for `tool`.
  bool alone(const char* tool) const {
    if (!started_) return true;
    int size = 1;
    int rank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (size > 1 && rank == 0) {
      std::cerr << tool << ": error: started as " << size << " MPI ranks, but " << tool
                << " runs as one process (each rank would do all the work and write the same output): run it "
                   "without mpirun or srun, or with one rank\n";
    }
    return size == 1;
  }

 private:
  bool started_;
};

}  // namespace hsdp::tool
