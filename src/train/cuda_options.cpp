// What device.type = cuda can honour (hsdp/train/cuda_backend.hpp), checked in every build.
#include <string>

#include "hsdp/core/error.hpp"
#include "hsdp/train/cuda_backend.hpp"

namespace hsdp::train {

// Every strategy, ZeRO++, fp16 and activation checkpointing run through the engine; what remains is the timeline,
// whose spans on a GPU would time the host's launches and not the kernels.
void check_cuda_options(const TrainOptions& o) {
  if (o.log_trace) {
    throw_config("device.type=cuda has no timeline yet: log.trace would time the host's launches, not the GPU's "
                 "kernels; set log.trace=false");
  }
}

}  // namespace hsdp::train
