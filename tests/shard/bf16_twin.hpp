#pragma once
// The CPU twin of a model that computes from bf16 parameters (the GPU's GptCuda<bf16>): the engine hands it each
// unit's compute copy in bf16, it widens the unit to fp32 (exactly: every bf16 value is an fp32 value) and runs the
// CPU model on it. Given the same values it computes what CpuUnitModel computes from fp32 compute copies of
// bf16-rounded parameters, so an engine whose compute copies are bf16 must train bit for bit as one whose compute
// copies are fp32 when precision.param=bf16: the gathers, conversions and hpZ slices in the compute dtype are all
// that differ, and they must not change a value.
#include <cstddef>
#include <span>
#include <vector>

#include "hsdp/core/dtype.hpp"
#include "hsdp/model/unit_model.hpp"

namespace hsdp::shard::testing {

class Bf16Twin final : public model::UnitModel {
 public:
  explicit Bf16Twin(model::CpuUnitModel& fp32) : fp32_(fp32), wide_(static_cast<std::size_t>(fp32.layout().num_units())) {}

  const model::ModelLayout& layout() const override { return fp32_.layout(); }
  DType compute_dtype() const override { return DType::bf16; }
  int micro_batch() const override { return fp32_.micro_batch(); }
  int seq_len() const override { return fp32_.seq_len(); }

  void forward_embedding(std::span<const std::int32_t> tokens, const void* emb) override {
    fp32_.forward_embedding(tokens, widen(kEmb, emb));
  }
  void forward_block(int block, const void* params) override {
    fp32_.forward_block(block, widen(model::ModelLayout::block_unit(block), params));
  }
  void forward_head(std::span<const std::int32_t> targets, const void* lnf, const void* emb, float dloss,
                    double* loss) override {
    fp32_.forward_head(targets, widen(final_unit(), lnf), widen(kEmb, emb), dloss, loss);
  }
  void evaluate_head(std::span<const std::int32_t> targets, const void* lnf, const void* emb, double* loss) override {
    fp32_.evaluate_head(targets, widen(final_unit(), lnf), widen(kEmb, emb), loss);
  }
  void backward_head(const void* lnf, const void* emb, float* lnf_grads, float* emb_grads) override {
    fp32_.backward_head(widen(final_unit(), lnf), widen(kEmb, emb), lnf_grads, emb_grads);
  }
  void backward_block(int block, const void* params, float* grads) override {
    fp32_.backward_block(block, widen(model::ModelLayout::block_unit(block), params), grads);
  }
  void backward_embedding(float* emb_grads) override { fp32_.backward_embedding(emb_grads); }
  void between_kernels(std::function<void()> hook) override { fp32_.between_kernels(std::move(hook)); }

 private:
  static constexpr int kEmb = model::ModelLayout::embedding_unit();
  int final_unit() const { return fp32_.layout().final_norm_unit(); }
  const float* widen(int unit, const void* params) {
    std::vector<float>& wide = wide_[static_cast<std::size_t>(unit)];
    wide.resize(fp32_.layout().unit(unit).numel);
    convert_to_f32(params, DType::bf16, wide);
    return wide.data();
  }

  model::CpuUnitModel& fp32_;
  std::vector<std::vector<float>> wide_;  // per unit: the head reads the final norm and the embedding together
};

}  // namespace hsdp::shard::testing
