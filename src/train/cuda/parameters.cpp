#include "hsdp/train/cuda/parameters.hpp"

#include <vector>

#include "hsdp/model/cuda/gpt.hpp"
#include "hsdp/model/cuda/layers.hpp"
#include "hsdp/model/unit_buffers.hpp"

namespace hsdp::train::cuda {

namespace dc = hsdp::device::cuda;

namespace {

// Each parameter's decay flag, in the flat order of GptCuda's buffers (the units one after another).
std::vector<optim::DecaySegment> decay_segments(const model::ModelLayout& layout) {
  std::vector<optim::DecaySegment> segments;
  std::size_t base = 0;
  for (int u = 0; u < layout.num_units(); ++u) {
    for (const auto* p : layout.unit_params(u)) segments.push_back({base + p->offset, p->numel, p->weight_decay});
    base += layout.unit(u).numel;
  }
  return segments;
}

}  // namespace

GptParameters::GptParameters(const model::ModelLayout& layout, std::uint64_t seed, cudaStream_t stream)
    : total_(layout.total_numel()),
      master_(total_),
      compute_(total_),
      grads_(total_),
      m_(total_),
      v_(total_),
      segments_(decay_segments(layout), total_) {
  model::UnitBuffers<float> host(layout);
  host.init(layout, seed);
  const std::vector<std::size_t> offsets = model::cuda::unit_offsets(layout);
  for (int u = 0; u < layout.num_units(); ++u) {
    dc::copy_to_device(master_.data() + offsets[static_cast<std::size_t>(u)], host.unit(u).data(), host.unit(u).size(),
                       stream);
  }
  refresh_compute_copy(stream);
  dc::zero_on_device(m_.data(), total_, stream);
  dc::zero_on_device(v_.data(), total_, stream);
  dc::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");  // the host buffers go out of scope
}

void GptParameters::zero_grads(cudaStream_t stream) {
  dc::zero_on_device(grads_.data(), total_, stream);
}

void GptParameters::adamw_update(const optim::cuda::AdamWValues& values, cudaStream_t stream) {
  optim::cuda::adamw_update(values, segments_, master_.data(), grads_.data(), m_.data(), v_.data(), compute_.data(),
                            stream);
}

void GptParameters::refresh_compute_copy(cudaStream_t stream) {
  model::cuda::convert(compute_.data(), master_.data(), total_, stream);
}

}  // namespace hsdp::train::cuda
