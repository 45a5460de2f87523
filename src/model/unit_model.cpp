#include "hsdp/model/unit_model.hpp"

namespace hsdp::model {
namespace {

const float* floats(const void* p) {
  return static_cast<const float*>(p);
}

}  // namespace

void CpuUnitModel::forward_embedding(std::span<const std::int32_t> tokens, const void* emb_params) {
  gpt_.forward_embedding(tokens, floats(emb_params));
}

void CpuUnitModel::forward_block(int block, const void* block_params) {
  gpt_.forward_block(block, floats(block_params));
}

void CpuUnitModel::forward_head(std::span<const std::int32_t> targets, const void* lnf_params, const void* emb_params,
                                float dloss, double* loss) {
  *loss = gpt_.forward_head(targets, floats(lnf_params), floats(emb_params));
  dloss_ = dloss;
}

// The probabilities are kept as for training: the same pass, so an evaluation's loss is a training forward's.
void CpuUnitModel::evaluate_head(std::span<const std::int32_t> targets, const void* lnf_params, const void* emb_params,
                                 double* loss) {
  *loss = gpt_.forward_head(targets, floats(lnf_params), floats(emb_params));
}

void CpuUnitModel::backward_head(const void* lnf_params, const void* emb_params, float* lnf_grads, float* emb_grads) {
  gpt_.backward_head(floats(lnf_params), floats(emb_params), lnf_grads, emb_grads, dloss_);
}

void CpuUnitModel::backward_block(int block, const void* block_params, float* block_grads) {
  gpt_.backward_block(block, floats(block_params), block_grads);
}

void CpuUnitModel::backward_embedding(float* emb_grads) {
  gpt_.backward_embedding(emb_grads);
}

}  // namespace hsdp::model
