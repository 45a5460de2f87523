#include "hsdp/device/cuda/blas.hpp"

#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "hsdp/core/error.hpp"
#include "hsdp/device/cuda/runtime.hpp"

namespace hsdp::device::cuda {
namespace {

void check_lt(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw_internal(std::string(what) + ": " + cublasLtGetStatusName(status) + ": " + cublasLtGetStatusString(status));
  }
}

cudaDataType_t lt_type(DType t) {
  if (t == DType::f32) return CUDA_R_32F;
  if (t == DType::bf16) return CUDA_R_16BF;
  throw_internal("cuBLASLt GEMM: element type " + std::string(to_string(t)) + " is not f32 or bf16");
}

// The largest power of two (at most 256) that divides the address: cuBLASLt picks kernels by alignment.
std::uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t align = 256;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

// With a batch, every matrix of it must share the first one's alignment: the stride in bytes bounds it too.
std::uint32_t alignment_of(const void* p, int batch, std::int64_t stride, DType t) {
  std::uint32_t align = alignment_of(p);
  if (batch > 1) {
    const auto bytes = static_cast<std::uint64_t>(stride) * (t == DType::f32 ? 4u : 2u);
    while (align > 1 && bytes % align != 0) align /= 2;
  }
  return align;
}

std::string describe(const GemmArgs& g) {
  return (g.batch > 1 ? std::to_string(g.batch) + " x " : std::string()) + "D[" + std::to_string(g.m) + "x" +
         std::to_string(g.n) + "] = op(A) op(B) with K=" + std::to_string(g.k) + (g.trans_a ? ", A^T" : "") +
         (g.trans_b ? ", B^T" : "") + ", lda/ldb/ldd " + std::to_string(g.lda) + "/" + std::to_string(g.ldb) + "/" +
         std::to_string(g.ldd) + ", " + std::string(to_string(g.ab_type)) + " -> " + std::string(to_string(g.d_type)) +
         (g.bias != nullptr ? ", bias" : "") + (g.c != nullptr && g.c != g.d ? ", C apart from D" : "") +
         (g.epilogue == Epilogue::gelu    ? ", GELU epilogue, ld_aux " + std::to_string(g.ld_aux)
          : g.epilogue == Epilogue::dgelu ? ", GELU-gradient epilogue, ld_aux " + std::to_string(g.ld_aux)
                                          : std::string());
}

// A separate C: its own pointer, read with D's layout.
bool separate_c(const GemmArgs& g) {
  return g.c != nullptr && g.c != g.d;
}

cublasLtEpilogue_t lt_epilogue(const GemmArgs& g) {
  switch (g.epilogue) {
    case Epilogue::gelu:
      return g.bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    case Epilogue::dgelu:
      return CUBLASLT_EPILOGUE_DGELU;
    case Epilogue::none:
      break;
  }
  return g.bias != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

// What decides a plan: shapes, types, epilogue and the pointers' alignments.
using PlanKey = std::array<std::int64_t, 24>;

PlanKey key_of(const GemmArgs& g) {
  return {g.trans_a,
          g.trans_b,
          g.m,
          g.n,
          g.k,
          g.lda,
          g.ldb,
          g.ldd,
          static_cast<std::int64_t>(g.ab_type),
          static_cast<std::int64_t>(g.d_type),
          g.bias != nullptr,
          alignment_of(g.a, g.batch, g.stride_a, g.ab_type),
          alignment_of(g.b, g.batch, g.stride_b, g.ab_type),
          alignment_of(g.d, g.batch, g.stride_d, g.d_type),
          g.bias != nullptr ? alignment_of(g.bias) : 0,
          g.beta != 0.0f,
          g.batch,
          g.stride_a,
          g.stride_b,
          g.stride_d,
          static_cast<std::int64_t>(g.epilogue),
          separate_c(g) ? alignment_of(g.c) : 0,
          g.aux != nullptr ? alignment_of(g.aux) : 0,
          g.ld_aux};
}

// Descriptors of one GEMM shape in cuBLASLt's column-major terms, and the algorithm the heuristic chose.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr;
  cublasLtMatrixLayout_t b = nullptr;
  cublasLtMatrixLayout_t d = nullptr;
  cublasLtMatmulAlgo_t algo{};

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

}  // namespace

struct BlasLt::Impl {
  cublasLtHandle_t handle = nullptr;
  DeviceBuffer<std::uint8_t> workspace;
  std::map<PlanKey, Plan> plans;
  bool epilogues = true;              // false: a GEMM with a GELU epilogue is declined without asking
  std::set<PlanKey> no_algorithm;     // shapes the heuristic had no kernel for: not asked again
  std::vector<std::string> declined;  // those with an epilogue, described, in the order found

  // Row-major D = op(A) op(B) is column-major D^T = op(B)^T op(A)^T: cuBLASLt's "A" is our B and its "B" our A,
  // each with its transpose flag, and its M x N is our N x M. Null where cuBLASLt has no algorithm for the shape.
  Plan* plan_for(const GemmArgs& g) {
    const PlanKey key = key_of(g);
    if (const auto it = plans.find(key); it != plans.end()) return &it->second;
    if (no_algorithm.contains(key)) return nullptr;
    if (epilogues || g.epilogue == Epilogue::none) {
      Plan& plan = plans[key];
      bool found = false;
      try {
        found = build(plan, g);
      } catch (...) {
        plans.erase(key);
        throw;
      }
      if (found) return &plan;
    }
    decline(g);
    return nullptr;
  }

  // The shape has no algorithm: its plan (if any) dropped and not asked for again. An epilogue's is named once (keys
  // that differ in alignment alone describe alike); a plain GEMM's ends the run (BlasLt::gemm).
  void decline(const GemmArgs& g) {
    const PlanKey key = key_of(g);
    plans.erase(key);
    no_algorithm.insert(key);
    if (const std::string shape = describe(g);
        g.epilogue != Epilogue::none && std::find(declined.begin(), declined.end(), shape) == declined.end()) {
      declined.push_back(shape);
    }
  }

  // False where the heuristic has no algorithm for the shape.
  bool build(Plan& plan, const GemmArgs& g) const {
    const cublasOperation_t op_a = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A = our B
    const cublasOperation_t op_b = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's B = our A
    const auto m = static_cast<std::uint64_t>(g.n);
    const auto n = static_cast<std::uint64_t>(g.m);
    const auto k = static_cast<std::uint64_t>(g.k);
    check_lt(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    check_lt(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a),
             "cublasLtMatmulDescSetAttribute(TRANSA)");
    check_lt(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b),
             "cublasLtMatmulDescSetAttribute(TRANSB)");
    const cublasLtEpilogue_t epilogue = lt_epilogue(g);
    if (epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
      check_lt(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue),
               "cublasLtMatmulDescSetAttribute(EPILOGUE)");
    }
    if (g.epilogue != Epilogue::none) {  // aux is [M, N] row-major: column-major N x M with leading dimension ld_aux
      const auto ld_aux = static_cast<std::int64_t>(g.ld_aux);
      check_lt(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld_aux, sizeof ld_aux),
               "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_LD)");
      check_lt(
          cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux, sizeof g.aux),
          "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_POINTER)");
    }
    if (g.bias != nullptr) {
      const cudaDataType_t bias_type = lt_type(g.d_type);
      check_lt(
          cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type),
          "cublasLtMatmulDescSetAttribute(BIAS_DATA_TYPE)");
      check_lt(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias),
               "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
    }
    const cudaDataType_t ab = lt_type(g.ab_type);
    const cudaDataType_t dt = lt_type(g.d_type);
    check_lt(op_a == CUBLAS_OP_N ? cublasLtMatrixLayoutCreate(&plan.a, ab, m, k, g.ldb)
                                 : cublasLtMatrixLayoutCreate(&plan.a, ab, k, m, g.ldb),
             "cublasLtMatrixLayoutCreate(A)");
    check_lt(op_b == CUBLAS_OP_N ? cublasLtMatrixLayoutCreate(&plan.b, ab, k, n, g.lda)
                                 : cublasLtMatrixLayoutCreate(&plan.b, ab, n, k, g.lda),
             "cublasLtMatrixLayoutCreate(B)");
    check_lt(cublasLtMatrixLayoutCreate(&plan.d, dt, m, n, g.ldd), "cublasLtMatrixLayoutCreate(D)");
    if (g.batch > 1) {
      const std::int32_t count = g.batch;
      const std::array<std::pair<cublasLtMatrixLayout_t, std::int64_t>, 3> layouts = {
          {{plan.a, g.stride_b}, {plan.b, g.stride_a}, {plan.d, g.stride_d}}};
      for (const auto& [layout, stride] : layouts) {
        check_lt(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
                 "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)");
        check_lt(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                  sizeof stride),
                 "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)");
      }
    }

    cublasLtMatmulPreference_t preference = nullptr;
    check_lt(cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
    const std::uint64_t workspace_bytes = workspace.size_bytes();
    const std::uint32_t align_a = alignment_of(g.b, g.batch, g.stride_b, g.ab_type);
    const std::uint32_t align_b = alignment_of(g.a, g.batch, g.stride_a, g.ab_type);
    const std::uint32_t align_d = alignment_of(g.d, g.batch, g.stride_d, g.d_type);
    const std::uint32_t align_c = separate_c(g) ? std::min(align_d, alignment_of(g.c)) : align_d;
    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                 &workspace_bytes, sizeof workspace_bytes);
    if (status == CUBLAS_STATUS_SUCCESS) {
      status = cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                    sizeof align_a);
    }
    if (status == CUBLAS_STATUS_SUCCESS) {
      status = cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                    sizeof align_b);
    }
    if (status == CUBLAS_STATUS_SUCCESS) {
      status = cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                                    sizeof align_c);
    }
    if (status == CUBLAS_STATUS_SUCCESS) {
      status = cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d,
                                                    sizeof align_d);
    }
    if (status == CUBLAS_STATUS_SUCCESS) {
      status = cublasLtMatmulAlgoGetHeuristic(handle, plan.desc, plan.a, plan.b, plan.d, plan.d, preference, 1, &result,
                                              &returned);
    }
    cublasLtMatmulPreferenceDestroy(preference);
    // The heuristic says "no kernel" either way: NOT_SUPPORTED (cublasLt.h: no heuristic for the configuration) or
    // success with none returned. For a GELU epilogue, whose caller has the separate kernels, any refusal counts as
    // that (INVALID_VALUE, say, for an epilogue and type cuBLASLt does not combine); a plain GEMM's ends the run.
    const bool refused =
        status == CUBLAS_STATUS_NOT_SUPPORTED || (status != CUBLAS_STATUS_SUCCESS && g.epilogue != Epilogue::none);
    if (!refused) check_lt(status, ("cublasLtMatmulAlgoGetHeuristic for " + describe(g)).c_str());
    if (refused || returned == 0 || result.state != CUBLAS_STATUS_SUCCESS) return false;
    plan.algo = result.algo;
    return true;
  }
};

BlasLt::BlasLt(std::size_t workspace_bytes, bool epilogues) : impl_(std::make_unique<Impl>()) {
  impl_->epilogues = epilogues;
  check_lt(cublasLtCreate(&impl_->handle), "cublasLtCreate");
  impl_->workspace = DeviceBuffer<std::uint8_t>(workspace_bytes);
}

BlasLt::~BlasLt() {
  impl_->plans.clear();
  if (impl_->handle != nullptr) cublasLtDestroy(impl_->handle);
}

std::size_t BlasLt::cached_plans() const {
  return impl_->plans.size();
}

const std::vector<std::string>& BlasLt::declined() const {
  return impl_->declined;
}

void BlasLt::gemm(const GemmArgs& g, cudaStream_t stream) {
  if (!try_gemm(g, stream)) throw_internal("cuBLASLt has no algorithm for " + describe(g));
}

bool BlasLt::try_gemm(const GemmArgs& g, cudaStream_t stream) {
  if (g.m <= 0 || g.n <= 0 || g.k <= 0) {
    if (g.m < 0 || g.n < 0 || g.k < 0) throw_internal("cuBLASLt GEMM with a negative dimension: " + describe(g));
    return true;
  }
  const bool extras = g.bias != nullptr || g.epilogue != Epilogue::none || separate_c(g);
  if (g.batch < 1 || (g.batch > 1 && extras)) throw_internal("cuBLASLt GEMM: bad batch: " + describe(g));
  if (separate_c(g) && g.beta == 0.0f)
    throw_internal("cuBLASLt GEMM: a C apart from D needs beta != 0: " + describe(g));
  if (g.epilogue != Epilogue::none && (g.aux == nullptr || g.ld_aux < g.n || g.ld_aux % 8 != 0)) {
    throw_internal("cuBLASLt GEMM: a GELU epilogue needs aux with ld_aux >= N and a multiple of 8: " + describe(g));
  }
  if (g.epilogue == Epilogue::dgelu && g.bias != nullptr) {
    throw_internal("cuBLASLt GEMM: the GELU-gradient epilogue takes no bias: " + describe(g));
  }
  Plan* const found = impl_->plan_for(g);
  if (found == nullptr) return false;
  Plan& plan = *found;
  // The plan may come from an earlier call with other (equally aligned) bias and aux pointers.
  if (g.bias != nullptr) {
    check_lt(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias),
             "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
  }
  if (g.epilogue != Epilogue::none) {
    check_lt(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux, sizeof g.aux),
             "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_POINTER)");
  }
  const void* c = separate_c(g) ? g.c : g.d;
  const cublasStatus_t status =
      cublasLtMatmul(impl_->handle, plan.desc, &g.alpha, g.b, plan.a, g.a, plan.b, &g.beta, c, plan.d, g.d, plan.d,
                     &plan.algo, impl_->workspace.data(), impl_->workspace.size_bytes(), stream);
  // The algorithm the heuristic chose, refused at launch: nothing is enqueued, so a GELU epilogue's caller can still
  // take its separate kernels.
  if (status == CUBLAS_STATUS_NOT_SUPPORTED && g.epilogue != Epilogue::none) {
    impl_->decline(g);
    return false;
  }
  check_lt(status, ("cublasLtMatmul " + describe(g)).c_str());
  return true;
}

}  // namespace hsdp::device::cuda
