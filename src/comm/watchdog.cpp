#include "hsdp/comm/watchdog.hpp"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <functional>
#include <mutex>
#include <stop_token>
#include <thread>
#include <vector>

#include "hsdp/comm/mpi.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/core/stall.hpp"
#include "hsdp/core/timer.hpp"

namespace hsdp::comm {

namespace {

// Laggards described one by one, at most; the rest are only listed by rank.
constexpr std::size_t kDetailedRanks = 8;

void pause_briefly(double waited_s) {
  // 4 ranks share 2 cores in tests, and a real job may oversubscribe too: never spin hot.
  if (waited_s < 1e-3) {
    sched_yield();
  } else {
    const timespec pause{0, 50'000};
    nanosleep(&pause, nullptr);
  }
}

std::string rank_list(const std::vector<const MemberSequence*>& members) {
  std::string list = members.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < members.size(); ++i) list += (i == 0 ? "" : ", ") + std::to_string(members[i]->rank);
  return list;
}

std::string whereabouts(const MemberSequence& m) {
  return Logger::concat("world rank ", m.world_rank, " on host ", m.host, ", last issued #", m.sequence);
}

// Runs `on_late` on a second thread unless destroyed within `seconds`.
class Backstop {
 public:
  Backstop(double seconds, std::function<void()> on_late)
      : thread_([seconds, on_late = std::move(on_late)](std::stop_token stop) {
          std::mutex mutex;
          std::condition_variable_any wake;
          std::unique_lock lock(mutex);
          wake.wait_for(lock, stop, std::chrono::duration<double>(seconds), [] { return false; });
          if (!stop.stop_requested()) on_late();
        }) {}

 private:
  std::jthread thread_;  // its destructor stops and joins it
};

}  // namespace

std::string laggards_text(std::span<const MemberSequence> members, std::uint64_t sequence, const std::string& group,
                          double limit_s) {
  std::vector<const MemberSequence*> behind;
  std::vector<const MemberSequence*> silent;
  for (const MemberSequence& m : members) {
    if (!m.answered) {
      silent.push_back(&m);
    } else if (m.sequence < sequence) {
      behind.push_back(&m);
    }
  }
  const std::string of_group = " of group '" + group + "' ";
  std::string text;
  if (!behind.empty()) {
    text = rank_list(behind) + of_group + (behind.size() == 1 ? "has" : "have") + " not reached it (";
    if (behind.size() == 1) {
      text += whereabouts(*behind.front());
    } else {
      for (std::size_t i = 0; i < behind.size() && i < kDetailedRanks; ++i) {
        text += Logger::concat(i == 0 ? "" : "; ", "rank ", behind[i]->rank, ": ", whereabouts(*behind[i]));
      }
      if (behind.size() > kDetailedRanks) text += Logger::concat("; and ", behind.size() - kDetailedRanks, " more");
    }
    text += ")";
  }
  if (!silent.empty()) {
    std::vector<std::string> hosts;
    for (const MemberSequence* m : silent) {
      if (!m->host.empty() && std::find(hosts.begin(), hosts.end(), m->host) == hosts.end()) hosts.push_back(m->host);
    }
    std::string on_hosts;
    for (std::size_t i = 0; i < hosts.size() && i < kDetailedRanks; ++i) on_hosts += (i == 0 ? "" : ", ") + hosts[i];
    if (hosts.size() > kDetailedRanks) on_hosts += Logger::concat(" and ", hosts.size() - kDetailedRanks, " more");
    text += Logger::concat(text.empty() ? "" : "; ", rank_list(silent), of_group,
                           "did not answer on the side channel within ", limit_s, " s",
                           on_hosts.empty() ? ""
                                            : " (" + std::string(hosts.size() == 1 ? "host " : "hosts ") + on_hosts +
                                                  ": stopped or unreachable)");
  } else if (behind.empty()) {
    text = "every rank" + of_group +
           "has reached it (the collective itself is stuck: collectives issued in a different order on some "
           "rank, or a transport that does not deliver)";
  }
  return text;
}

void WatchedOp::wait() {
  const Stopwatch watch;
  while (!test()) {
    const double waited = watch.seconds();
    if (waited > id_.timeout_s) fire_watchdog();
    pause_briefly(waited);
  }
}

bool WatchedOp::test() {
  if (!done_ && poll()) done_ = true;
  return done_;
}

std::string WatchedOp::describe() const {
  const std::string during = stall_context();
  return Logger::concat(during.empty() ? "" : "during " + during + ": ", to_string(id_.collective), " #", id_.sequence,
                        " on group '", id_.group, "' (", id_.backend.empty() ? "" : id_.backend + ", ", id_.size,
                        " ranks, this is rank ", id_.rank, ")");
}

std::string WatchedOp::who_is_behind() const {
  const std::shared_ptr<const BoardSeat> seat = id_.seat.lock();
  if (seat == nullptr) return "";
  // MPI may block inside the read on a transport that needs the silent ranks' help: then a second thread ends the
  // job (MPI_Abort off the main thread, acceptable on the way down).
  const Backstop backstop(kSideChannelLimitS + 2.0, [this] {
    id_.logger->any_rank("comm watchdog: ", describe(), " did not complete within ", id_.timeout_s,
                         " s; the side channel did not answer within ", kSideChannelLimitS + 2.0,
                         " s; aborting the job (exit ", kExitComm, ")");
    before_abort();
    MpiEnvironment::abort_job(kExitComm);
  });
  return laggards_text(seat->read(kSideChannelLimitS), id_.sequence, id_.group, kSideChannelLimitS);
}

void WatchedOp::fire_watchdog() const {
  const std::string behind = who_is_behind();
  id_.logger->any_rank("comm watchdog: ", describe(), " did not complete within ", id_.timeout_s, " s; ",
                       behind.empty() ? "" : behind + "; ", "aborting the job (exit ", kExitComm, ")");
  // Give the other ranks' watchdogs a moment to print their own line before the job goes down.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  before_abort();
  MpiEnvironment::abort_job(kExitComm);
}

void WatchedOp::fail(const std::string& reason) const {
  id_.logger->any_rank("comm error: ", describe(), " failed: ", reason, "; aborting the job (exit ", kExitComm, ")");
  before_abort();
  MpiEnvironment::abort_job(kExitComm);
}

}  // namespace hsdp::comm
