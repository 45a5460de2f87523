#include "hsdp/model/cuda/kernel_timer.hpp"

#include <cstring>

namespace hsdp::model::cuda {

namespace dc = hsdp::device::cuda;

void KernelTimer::mark(const char* kind, cudaStream_t stream) {
  // A group of the kind the open one has extends it: no event between them.
  if (kind != nullptr && !marks_.empty() && marks_.back().kind != nullptr && std::strcmp(marks_.back().kind, kind) == 0)
    return;
  if (marks_.size() == events_.size()) events_.push_back(std::make_unique<dc::Event>(dc::Event::Timing::on));
  dc::Event* event = events_[marks_.size()].get();
  event->record(stream);
  marks_.push_back({kind, event});
}

std::vector<std::pair<std::string, double>> KernelTimer::report() {
  std::vector<std::pair<std::string, double>> totals;
  if (!marks_.empty()) marks_.back().event->synchronize();
  for (std::size_t i = 0; i + 1 < marks_.size(); ++i) {
    if (marks_[i].kind == nullptr) continue;
    const double ms = marks_[i + 1].event->elapsed_ms_since(*marks_[i].event);
    auto it = totals.begin();
    while (it != totals.end() && it->first != marks_[i].kind) ++it;
    if (it == totals.end()) {
      totals.emplace_back(marks_[i].kind, ms);
    } else {
      it->second += ms;
    }
  }
  marks_.clear();
  return totals;
}

}  // namespace hsdp::model::cuda
