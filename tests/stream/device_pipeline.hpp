#pragma once
// An FSDP-shaped pipeline of DeviceOps calls on three queues (gather, compute, reduce) and the host, for any device
// and executor: per unit, gather (2 x its shard into a full buffer), forward (activation = activation / 2 + full),
// reduce (gradient = activation / 4); then the squared norm of the gradients, read by the host. Every scale is a
// power of two, so each element's arithmetic is exact or one rounding the same on every device: the gradients must
// match the inline CPU run bit for bit on any executor that keeps the order; the norm (a sum whose order is the
// device's) to 1e-12 relative.
#include <cstring>
#include <vector>

#include "hsdp/core/memory.hpp"
#include "hsdp/stream/device_ops.hpp"
#include "hsdp/stream/queues.hpp"

namespace hsdp::stream::testing {

struct PipelineResult {
  std::vector<float> grads;
  double norm = 0;
};

inline PipelineResult run_device_pipeline(DeviceOps& dev, StreamQueues& queues) {
  constexpr int kUnits = 4;
  constexpr std::size_t kSize = 257;
  const QueueId gather = queues.make_queue("gather");
  const QueueId compute = queues.make_queue("compute", QueueRole::compute);
  const QueueId reduce = queues.make_queue("reduce");
  std::vector<DeviceArray<float>> shards, gathered, grads;
  std::vector<std::vector<float>> host_shards(kUnits, std::vector<float>(kSize));
  for (int u = 0; u < kUnits; ++u) {
    for (std::size_t i = 0; i < kSize; ++i) {
      host_shards[static_cast<std::size_t>(u)][i] = 0.001f * static_cast<float>(i + 7 * static_cast<std::size_t>(u));
    }
    shards.push_back(dev.array<float>(kSize, MemCategory::params));
    gathered.push_back(dev.array<float>(kSize, MemCategory::comm_buffers));
    grads.push_back(dev.array<float>(kSize, MemCategory::grads));
  }
  DeviceArray<float> activation = dev.array<float>(kSize, MemCategory::activations);
  DeviceArray<double> norm = dev.array<double>(1, MemCategory::comm_buffers);
  const BufferId activation_id = queues.track("activation"), norm_id = queues.track("norm");
  std::vector<BufferId> gathered_id, grads_id, shard_id;
  for (int u = 0; u < kUnits; ++u) {
    gathered_id.push_back(queues.track("gathered " + std::to_string(u)));
    grads_id.push_back(queues.track("gradients " + std::to_string(u)));
    shard_id.push_back(queues.track("shard " + std::to_string(u)));
  }
  // Memory comes zeroed on the stream the device allocates on (a GPU: the compute stream, stream-ordered): ready for
  // the other streams once the host has seen it.
  queues.synchronize(queues.record(compute));
  queues.enqueue(compute, "set up", {writes(activation_id)}, [&] {
    std::vector<float> ones(kSize, 1.0f);
    dev.copy_from_host(activation.data(), ones.data(), kSize * sizeof(float));
  });
  for (int u = 0; u < kUnits; ++u) {
    const auto su = static_cast<std::size_t>(u);
    const std::string n = std::to_string(u);
    queues.enqueue(gather, "load shard " + n, {writes(shard_id[su])}, [&, su] {
      dev.copy_from_host(shards[su].data(), host_shards[su].data(), kSize * sizeof(float));
    });
    queues.enqueue(gather, "gather unit " + n, {reads(shard_id[su]), writes(gathered_id[su])},
                   [&, su] { dev.accumulate(gathered[su].data(), shards[su].data(), kSize, 2.0f); });
    queues.wait(compute, queues.record(gather));
    queues.enqueue(compute, "forward unit " + n, {reads(gathered_id[su]), writes(activation_id)}, [&, su] {
      dev.accumulate(activation.data(), activation.data(), kSize, -0.5f);
      dev.accumulate(activation.data(), gathered[su].data(), kSize, 1.0f);
    });
    queues.wait(reduce, queues.record(compute));
    queues.enqueue(reduce, "reduce unit " + n, {reads(activation_id), writes(grads_id[su])},
                   [&, su] { dev.accumulate(grads[su].data(), activation.data(), kSize, 0.25f); });
    queues.wait(compute, queues.record(reduce));  // the next forward overwrites what this reduction reads
  }
  for (int u = 0; u < kUnits; ++u) {
    const auto su = static_cast<std::size_t>(u);
    queues.enqueue(reduce, "squared sum " + std::to_string(u), {reads(grads_id[su]), writes(norm_id)},
                   [&, su] { dev.squared_sum(grads[su].data(), kSize, norm.data()); });
  }
  queues.synchronize(queues.record(reduce));
  queues.host_read(norm_id, "read the norm");
  PipelineResult result;
  result.grads.resize(kUnits * kSize);
  for (int u = 0; u < kUnits; ++u) {
    dev.copy_to_host(result.grads.data() + static_cast<std::size_t>(u) * kSize, grads[static_cast<std::size_t>(u)].data(),
                     kSize * sizeof(float));
  }
  dev.copy_to_host(&result.norm, norm.data(), sizeof(double));
  queues.drain();
  return result;
}

}  // namespace hsdp::stream::testing
