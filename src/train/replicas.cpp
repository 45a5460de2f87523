#include "hsdp/train/replicas.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <sstream>
#include <utility>

#include "hsdp/ckpt/checksum.hpp"
#include "hsdp/core/files.hpp"
#include "hsdp/core/log.hpp"

namespace hsdp::train {
namespace {

constexpr std::size_t kWords = 8;  // a record on the wire
constexpr std::size_t kHostBytes = 64;

std::uint64_t sum_of(const float* data, std::size_t count, std::size_t first) {
  return data == nullptr ? 0 : ckpt::checksum_range({data, count}, first);
}

const char* tensor_name(std::uint64_t kind, std::size_t t) {
  static constexpr const char* kInner[] = {"master weights", "AdamW m", "AdamW v"};
  static constexpr const char* kOuter[] = {"outer parameters", "outer momentum", "outer error feedback"};
  static constexpr const char* kFull[] = {"full compute parameters", "", ""};
  return kind == 0 ? kInner[t] : kind == 1 ? kOuter[t] : kFull[t];
}

// "rank 2 (host a)", "ranks 0, 1, 3 (hosts a, a, b)": the first 8, then how many more (a line, not a page).
std::string rank_list(const std::vector<int>& ranks, const std::vector<std::string>& hosts) {
  constexpr std::size_t kShown = 8;
  const std::size_t shown = std::min(ranks.size(), kShown);
  std::ostringstream out;
  out << (ranks.size() == 1 ? "rank " : "ranks ");
  for (std::size_t i = 0; i < shown; ++i) out << (i ? ", " : "") << ranks[i];
  out << (ranks.size() == 1 ? " (host " : " (hosts ");
  for (std::size_t i = 0; i < shown; ++i) out << (i ? ", " : "") << hosts[static_cast<std::size_t>(ranks[i])];
  out << ")";
  if (ranks.size() > shown) out << " and " << ranks.size() - shown << " more";
  return out.str();
}

}  // namespace

std::vector<ReplicaRecord> replica_records(int island, std::span<const shard::UnitShard> inner,
                                           std::span<const shard::UnitShard> outer,
                                           std::span<const shard::Engine::ReplicatedParams> full) {
  std::vector<ReplicaRecord> records;
  for (const shard::UnitShard& s : inner) {
    if (s.count == 0) continue;
    records.push_back({0,
                       static_cast<std::uint64_t>(island),
                       static_cast<std::uint64_t>(s.unit),
                       s.begin,
                       s.count,
                       {sum_of(s.params, s.count, s.begin), sum_of(s.exp_avg, s.count, s.begin),
                        sum_of(s.exp_avg_sq, s.count, s.begin)}});
  }
  for (const shard::UnitShard& s : outer) {
    if (s.count == 0) continue;
    records.push_back({1,
                       0,
                       static_cast<std::uint64_t>(s.unit),
                       s.begin,
                       s.count,
                       {sum_of(s.params, s.count, s.begin), sum_of(s.exp_avg, s.count, s.begin), 0}});
  }
  for (const shard::Engine::ReplicatedParams& f : full) {
    const std::string_view bytes(reinterpret_cast<const char*>(f.bytes), f.size);
    records.push_back({2, static_cast<std::uint64_t>(island), static_cast<std::uint64_t>(f.unit), 0, f.size,
                       {fingerprint(bytes), 0, 0}});
  }
  return records;
}

ReplicaVerdict replica_verdict(const std::vector<std::vector<ReplicaRecord>>& records,
                               const std::vector<std::string>& hosts, const model::ModelLayout& layout) {
  using Key = std::array<std::uint64_t, 5>;
  using Sums = std::array<std::uint64_t, 3>;
  std::map<Key, std::vector<std::pair<int, Sums>>> groups;
  for (std::size_t r = 0; r < records.size(); ++r) {
    for (const ReplicaRecord& x : records[r]) {
      groups[{x.kind, x.island, x.unit, x.begin, x.count}].push_back(
          {static_cast<int>(r), {x.sums[0], x.sums[1], x.sums[2]}});
    }
  }
  ReplicaVerdict verdict;
  std::size_t differing = 0;
  const bool islands = std::any_of(groups.begin(), groups.end(), [](const auto& g) { return g.first[1] != 0; });
  for (const auto& [key, members] : groups) {
    if (members.size() < 2) continue;
    ++verdict.groups;
    // The majority: the sums more than half the members hold.
    std::map<Sums, std::size_t> votes;
    for (const auto& m : members) ++votes[m.second];
    if (votes.size() == 1) continue;
    ++differing;
    if (!verdict.text.empty()) continue;
    const auto top =
        std::max_element(votes.begin(), votes.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
    const bool majority = 2 * top->second > members.size();
    std::vector<int> odd, agree;
    for (const auto& m : members) (majority && m.second == top->first ? agree : odd).push_back(m.first);
    // The tensors in which a member differs from the majority (or from the first member).
    const Sums& reference = majority ? top->first : members.front().second;
    const std::uint64_t kind = key[0];
    std::string tensors;
    for (std::size_t t = 0; t < 3; ++t) {
      const bool differs =
          std::any_of(members.begin(), members.end(), [&](const auto& m) { return m.second[t] != reference[t]; });
      if (differs) tensors += (tensors.empty() ? "" : ", ") + std::string(tensor_name(kind, t));
    }
    std::ostringstream out;
    out << "unit " << layout.unit(static_cast<int>(key[2])).name << (kind == 2 ? " (bytes " : " (elements ") << key[3]
        << " to " << key[3] + key[4]
        << (kind != 1 && islands ? " of island " + std::to_string(key[1]) : std::string()) << "): ";
    if (majority) {
      out << "the " << tensors << " of " << rank_list(odd, hosts) << " differ from those of " << rank_list(agree, hosts)
          << (agree.size() > 1 ? ", which agree" : "");
    } else {
      out << rank_list(odd, hosts) << " hold " << members.size() << " replicas of it with different " << tensors
          << " and no majority says which are right";
    }
    verdict.text = out.str();
  }
  if (differing > 1) verdict.text += "; " + std::to_string(differing - 1) + " more replica group(s) differ";
  return verdict;
}

std::vector<std::string> rank_host_names(comm::Communicator& world) {
  const auto n = static_cast<std::size_t>(world.size());
  const std::string host = host_name();
  std::vector<char> mine(kHostBytes, 0), every(kHostBytes * n);
  std::copy_n(host.begin(), std::min(host.size(), kHostBytes - 1), mine.begin());
  world.all_gather(mine.data(), every.data(), kHostBytes, DType::u8);
  std::vector<std::string> hosts;
  for (std::size_t r = 0; r < n; ++r) hosts.emplace_back(every.data() + r * kHostBytes);
  return hosts;
}

ReplicaChecker::ReplicaChecker(comm::Communicator& world, const model::ModelLayout& layout,
                               std::vector<std::string> hosts)
    : world_(world), layout_(layout), hosts_(std::move(hosts)) {}

std::string ReplicaChecker::check(int island, std::span<const shard::UnitShard> inner,
                                  std::span<const shard::UnitShard> outer,
                                  std::span<const shard::Engine::ReplicatedParams> full) {
  const std::vector<ReplicaRecord> mine = replica_records(island, inner, outer, full);
  const auto n = static_cast<std::size_t>(world_.size());
  // How many records each rank has, then every rank's, padded to the most.
  std::uint64_t count = mine.size();
  std::vector<std::uint64_t> counts(n);
  world_.all_gather(&count, counts.data(), sizeof count, DType::u8);
  const std::uint64_t most = *std::max_element(counts.begin(), counts.end());
  std::vector<std::uint64_t> words(most * kWords, 0), every(most * kWords * n);
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const ReplicaRecord& x = mine[i];
    const std::uint64_t w[kWords] = {x.kind, x.island, x.unit, x.begin, x.count, x.sums[0], x.sums[1], x.sums[2]};
    std::copy_n(w, kWords, words.data() + i * kWords);
  }
  world_.all_gather(words.data(), every.data(), words.size() * sizeof(std::uint64_t), DType::u8);
  std::vector<std::vector<ReplicaRecord>> records(n);
  for (std::size_t r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < counts[r]; ++i) {
      const std::uint64_t* w = every.data() + (r * most + i) * kWords;
      records[r].push_back({w[0], w[1], w[2], w[3], w[4], {w[5], w[6], w[7]}});
    }
  }
  const ReplicaVerdict verdict = replica_verdict(records, hosts_, layout_);
  groups_ = verdict.groups;
  return verdict.text;
}

}  // namespace hsdp::train
