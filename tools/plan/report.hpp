#pragma once
// hsdp-plan's output: tables a person reads, and one JSON object per strategy (--json).
#include <string>

#include "plan/planner.hpp"

namespace hsdp::plan {

struct ReportContext {
  std::string cluster_notes;  // where the link numbers came from (flags, defaults, --calibrate)
};

std::string table_report(const PlanInputs& inputs, const Plan& plan, const ReportContext& context);
// One line per strategy: {"model":...,"strategy":...,"bytes_intra_all_ranks":...,...}; the recommended one has
// "reason", "deck_keys" (the hsdp-train keys that select it, space-separated) and "fastest". Then one line per
// island row (Plan::islands: "strategy":"islands", "islands", "inner_strategy", "exchange_ms", "offered", ...).
std::string json_report(const PlanInputs& inputs, const Plan& plan);

// "1.50 GiB", "512 B": binary units, three significant digits.
std::string human_bytes(double bytes);

}  // namespace hsdp::plan
