#pragma once
// Finite-difference helpers for the gradient tests (double precision).
//
// Error measure: the norm-wise relative error of a whole tensor,
//   rel(a, n) = ||a - n||_2 / max(||a||_2, ||n||_2, 1e-30),
// with a = analytic (backward) and n = numeric (central differences). Elementwise |a-n|/|a| is not used:
// a component whose true value is ~0 has a numeric value of pure rounding noise (~1e-11, see below), and
// its ratio would say nothing about the backward code. The norm ratio is dominated by the significant
// components and still catches a wrong term anywhere (a wrong component of size s adds s to the numerator).
//
// Central differences with h = 1e-5 in double: truncation error ~ h^2 |f'''| / 6 ~ 1e-11, rounding error
// ~ eps |f| / h ~ 1e-16 * |f| / 1e-5 ~ 1e-11 * |f|; with gradients of order 0.1..1 the expected relative
// error is ~1e-9, so the bound 1e-6 asked of every test has three orders of margin yet catches any
// real mistake (a wrong factor or a missing term gives errors of order 1e-2 or more).
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include <gtest/gtest.h>

#include <span>
#include <string>

#include "hsdp/model/gpt.hpp"
#include "hsdp/model/rng.hpp"
#include "hsdp/model/unit_buffers.hpp"

namespace hsdp::model::testing {

inline constexpr double kFiniteDifferenceStep = 1e-5;
inline constexpr double kGradientTolerance = 1e-6;

inline std::vector<double> random_values(std::size_t n, std::uint64_t seed, double scale = 1.0, double offset = 0.0) {
  Rng rng(seed);
  std::vector<double> v(n);
  for (double& x : v) x = offset + scale * rng.normal();
  return v;
}

inline double weighted_sum(const std::vector<double>& weights, const double* values) {
  double s = 0;
  for (std::size_t i = 0; i < weights.size(); ++i) s += weights[i] * values[i];
  return s;
}

inline double relative_error(const std::vector<double>& analytic, const std::vector<double>& numeric) {
  double diff = 0, na = 0, nn = 0;
  for (std::size_t i = 0; i < analytic.size(); ++i) {
    diff += (analytic[i] - numeric[i]) * (analytic[i] - numeric[i]);
    na += analytic[i] * analytic[i];
    nn += numeric[i] * numeric[i];
  }
  return std::sqrt(diff) / std::max({std::sqrt(na), std::sqrt(nn), 1e-30});
}

// d objective / d x[i] by central differences; x is restored.
inline std::vector<double> numeric_gradient(std::vector<double>& x, const std::function<double()>& objective,
                                            double h = kFiniteDifferenceStep) {
  std::vector<double> g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = objective();
    x[i] = saved - h;
    const double down = objective();
    x[i] = saved;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

// Every parameter of `layout`: the gradient a forward and backward of `model` (Gpt<double>) put into `grads` against
// central differences of model.evaluate() over each element of `params`, within kGradientTolerance; `label` names the
// case in a failure.
inline void expect_every_parameter_matches_finite_differences(const ModelLayout& layout, Gpt<double>& model,
                                                              UnitBuffers<double>& params, UnitBuffers<double>& grads,
                                                              std::span<const std::int32_t> tokens,
                                                              std::span<const std::int32_t> targets,
                                                              const std::string& label = "") {
  model.forward(tokens, targets, params.const_pointers());
  model.backward(params.const_pointers(), grads.pointers(), 1.0);
  const double h = kFiniteDifferenceStep;
  for (const ParamInfo& p : layout.params()) {
    auto values = params.param(p);
    std::vector<double> analytic(grads.param(p).begin(), grads.param(p).end()), numeric(p.numel);
    for (std::size_t i = 0; i < p.numel; ++i) {
      const double saved = values[i];
      values[i] = saved + h;
      const double up = model.evaluate(tokens, targets, params.const_pointers());
      values[i] = saved - h;
      const double down = model.evaluate(tokens, targets, params.const_pointers());
      values[i] = saved;
      numeric[i] = (up - down) / (2 * h);
    }
    EXPECT_LT(relative_error(analytic, numeric), kGradientTolerance) << p.name << label;
  }
}

}  // namespace hsdp::model::testing
