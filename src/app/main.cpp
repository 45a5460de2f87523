// hsdp-train: parse the deck, build the mesh, train. Every rank runs this.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <vector>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>

#include "hsdp/app/deck.hpp"
#include "hsdp/comm/agree.hpp"
#include "hsdp/comm/mesh.hpp"
#include "hsdp/comm/mpi.hpp"
#include "hsdp/comm/topology.hpp"
#include "hsdp/core/fault.hpp"
#include "hsdp/core/files.hpp"
#include "hsdp/core/log.hpp"
#include "hsdp/core/stall.hpp"
#include "hsdp/quant/blockwise.hpp"
#include "hsdp/train/backend.hpp"
#include "hsdp/train/signals.hpp"
#include "hsdp/train/trainer.hpp"

namespace {

using hsdp::app::CommandLine;
using hsdp::app::ConfigDeck;

// Watched start-up: with a deck that cannot be read, stalls are bounded by comm.startup_timeout_s's default.
constexpr double kStartupDefaultLimitS = 600;

// This build of hsdp-train: its version and when this file was compiled (a stale binary on one node differs).
std::string build_id() {
  return std::string(HSDP_VERSION) + " built " + __DATE__ + " " + __TIME__;
}

// Every rank must run the same build on the same deck: ranks launched with another deck (an edited copy on one node,
// a stale job script, MPMD by mistake) would train apart on their own shards, or hang at the first collective their
// model shapes do not share. Refused on every rank with one line naming the ranks and hosts that differ from rank 0
// (exit 2). Collective over MPI_COMM_WORLD; MPI_Allgather only (no rank can skip it).
void check_same_run(const std::string& deck_text) {
  constexpr int kHostChars = 64;
  struct Mine {
    std::uint64_t deck = 0, build = 0;
    char host[kHostChars] = {};
  } mine;
  mine.deck = hsdp::fingerprint(deck_text);
  mine.build = hsdp::fingerprint(build_id());
  const std::string host = hsdp::host_name();
  std::copy_n(host.begin(), std::min<std::size_t>(host.size(), kHostChars - 1), mine.host);
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<Mine> all(static_cast<std::size_t>(size));
  MPI_Allgather(&mine, sizeof(Mine), MPI_BYTE, all.data(), sizeof(Mine), MPI_BYTE, MPI_COMM_WORLD);
  const auto list = [&](auto differs) {
    std::string ranks;
    int count = 0;
    for (int r = 1; r < size; ++r) {
      const Mine& theirs = all[static_cast<std::size_t>(r)];
      if (!differs(theirs)) continue;
      if (++count <= 8) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r) + " (" + theirs.host + ")";
    }
    if (count > 8) ranks += " and " + std::to_string(count - 8) + " more";
    return ranks;
  };
  const std::string host0 = std::string(" (") + all[0].host + ")";
  if (const std::string ranks = list([&](const Mine& m) { return m.build != all[0].build; }); !ranks.empty()) {
    throw hsdp::AgreedError(hsdp::ErrorKind::config,
                            "rank(s) " + ranks + " run another build of hsdp-train than rank 0" + host0 +
                                " (hsdp " + build_id() + " on this rank): install one build where every node "
                                "reads it, and launch that");
  }
  if (const std::string ranks = list([&](const Mine& m) { return m.deck != all[0].deck; }); !ranks.empty()) {
    throw hsdp::AgreedError(hsdp::ErrorKind::config,
                            "rank(s) " + ranks + " were given another deck than rank 0" + host0 +
                                " (another --config file or other --section.key values): every rank must train "
                                "the same run; compare `hsdp-train <your arguments> --print-config` on those hosts");
  }
}

// Open MPI's mpirun finds a lost host only by TCP keepalive on its daemons' connections (OMPI_MCA_oob_tcp_keepalive_*:
// silent for time + intvl x probes seconds), and once it has sent that host anything (the kill after the watchdog's
// MPI_Abort) it waits for TCP's retransmission limit instead, about 15 minutes. So the launcher's lost-host limit must
// end the job first: comm.timeout_s at least 10 s above it, or a cut link hangs the job (tools/cluster.sh and
// jobscripts/mpirun_baremetal.sh set the keepalive from HSDP_LOST_HOST_S). Where the launcher set no keepalive,
// nothing to compare.
void check_lost_host_limit(double comm_timeout_s) {
  const auto get = [](const char* name) -> double {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return -1;
    char* end = nullptr;
    const double x = std::strtod(v, &end);
    return end != v && *end == '\0' && x >= 0 ? x : -1;
  };
  const double time = get("OMPI_MCA_oob_tcp_keepalive_time");
  const double intvl = get("OMPI_MCA_oob_tcp_keepalive_intvl");
  const double probes = get("OMPI_MCA_oob_tcp_keepalive_probes");
  if (time < 0 || intvl < 0 || probes < 0) return;
  const double lost_s = time + intvl * probes;
  if (comm_timeout_s >= lost_s + 10) return;
  std::ostringstream text;
  text << "comm.timeout_s=" << comm_timeout_s << " does not leave the launcher's lost-host limit room: mpirun ends a "
       << "job whose host went silent after " << lost_s << " s (OMPI_MCA_oob_tcp_keepalive_time " << time
       << " + intvl " << intvl << " x probes " << probes << "; HSDP_LOST_HOST_S sets them in tools/cluster.sh and "
       << "jobscripts/mpirun_baremetal.sh), and a watchdog that fires first aborts through a launcher that then waits "
       << "about 15 minutes for the lost host: set comm.timeout_s to at least " << lost_s + 10
       << " s, or lower HSDP_LOST_HOST_S";
  hsdp::throw_config(text.str());
}

int run(int argc, char** argv, const hsdp::Logger& log, const hsdp::train::StopSignals& signals) {
  const int rank = log.rank();
  CommandLine cli;
  ConfigDeck deck;
  // Parsed by every rank on its own, so that the deck's comm.timeout_s bounds even the first collective. Errors of
  // the typed options (across keys) are said after --help and --print-config, which show such a deck.
  std::optional<hsdp::Error> parse_error;
  std::optional<hsdp::Error> options_error;
  hsdp::train::TrainOptions options;
  try {
    deck = ConfigDeck::parse(argc, argv, cli);
    try {
      options = hsdp::app::train_options(deck);
    } catch (const hsdp::Error& e) {
      options_error = e;
    }
  } catch (const hsdp::Error& e) {
    parse_error = e;
  }
  const double startup_limit_s = parse_error || options_error ? kStartupDefaultLimitS : options.comm.startup_timeout_s;
  std::optional<hsdp::StallPhase> startup(std::in_place, "start-up", startup_limit_s, "comm.startup_timeout_s",
                                          rank == 0);
  hsdp::fault_point("startup", rank);
  {
    const hsdp::StallGuard op("agreeing on the deck");
    hsdp::comm::agree(MPI_COMM_WORLD, [&] {
      if (parse_error) throw *parse_error;
    });
  }
  if (cli.help) {
    log.info(hsdp::app::help_text("hsdp-train"));
    return hsdp::kExitOk;
  }
  if (cli.version) {
    log.info("hsdp-train ", HSDP_VERSION);
    return hsdp::kExitOk;
  }
  if (cli.print_config) {
    log.info(deck.to_ini());
    return hsdp::kExitOk;
  }
  if (cli.check_config) {
    hsdp::comm::agree(MPI_COMM_WORLD, [&] {
      if (options_error) throw *options_error;
    });
    log.info(deck.to_ini());
    return hsdp::kExitOk;
  }
  {
    const hsdp::StallGuard op("comparing the deck and build of every rank");
    check_same_run(deck.to_ini(false));
  }

  hsdp::comm::CommOptions comm_options;
  comm_options.timeout_s = options.comm.timeout_s;
  hsdp::comm::Topology topology;
  {
    const hsdp::StallGuard op("detecting the topology");
    hsdp::comm::agree(MPI_COMM_WORLD,
                      [&] { topology = hsdp::comm::detect_topology(MPI_COMM_WORLD, options.topology); });
  }
  hsdp::comm::MpiCommunicator world(hsdp::comm::MpiComm(MPI_COMM_WORLD), "world", topology.node_of_rank, comm_options,
                                    log);
  std::unique_ptr<hsdp::comm::ProcessMesh> mesh;
  {
    const hsdp::StallGuard op("building the process mesh");
    hsdp::comm::agree(MPI_COMM_WORLD, [&] {
      if (options_error) throw *options_error;
      check_lost_host_limit(options.comm.timeout_s);
    });
    hsdp::comm::agree(MPI_COMM_WORLD, [&] { mesh = hsdp::train::make_mesh(options, world, topology, log); });
  }
  if (cli.print_mesh) {
    const std::string text = mesh->describe();
    log.info(text);
    return hsdp::kExitOk;
  }
  startup.reset();  // train() watches its own phases
  const auto summary = hsdp::train::train(options, *mesh, signals, log);
  if (!summary.stopped_by_signal) return hsdp::kExitOk;
  return summary.resumable ? hsdp::kExitRequeue : hsdp::kExitStopped;
}

// An error only this rank has: the other ranks wait in some collective for this one. It is said here, on this rank,
// and the job ends at once (MPI_Abort), before unwinding: the destructors on the way (H5Fclose of a parallel file,
// MPI_Win_free) are collective and would wait for ranks that never come. main() catches only the errors every rank
// throws (AgreedError), so any other exception reaches this handler with the stack as it was at the throw.
[[noreturn]] void end_job_on_local_error() {
  int rank = 0;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized != 0 && !hsdp::comm::mpi_finalized()) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const hsdp::Logger log(rank, hsdp::host_name());
  int code = hsdp::kExitInternal;
  try {
    if (const std::exception_ptr e = std::current_exception()) std::rethrow_exception(e);
    log.error("internal: terminate called without an exception");
  } catch (const hsdp::Error& e) {
    log.error(hsdp::to_string(e.kind()), ": ", e.what());
    code = e.exit_code();
  } catch (const std::exception& e) {
    log.error("internal: ", e.what());
  } catch (...) {
    log.error("internal: an exception that is not a std::exception");
  }
  hsdp::comm::MpiEnvironment::abort_job(code);
}

// The stall watch's verdict (on its own thread): rank 0 speaks at once; any other rank first gives rank 0 a moment,
// so the job ends with one diagnosis unless rank 0 is the rank that stalled.
void on_stall(const hsdp::Logger& log, const hsdp::StallReport& r) {
  if (!log.is_root()) std::this_thread::sleep_for(std::chrono::seconds(3));
  log.any_rank("watchdog: ", r.phase, ": ", r.operation, " did not finish within ", r.limit_s, " s (", r.limit_key,
               "): another rank is stopped or frozen, or the file system does not answer; aborting the job (exit ",
               hsdp::kExitComm, ")");
  hsdp::comm::MpiEnvironment::abort_job(hsdp::kExitComm);
}

// Run by the dynamic loader before any shared library's constructor (OpenBLAS, Open MPI, HDF5: tens of
// milliseconds): a SIGTERM or SIGUSR1 then is recorded like one in main (it ended the process with 143 or 138).
extern "C" void hsdp_record_signals_from_start(int, char**, char**) {
  hsdp::train::StopSignals::record_from_start();
}
[[gnu::section(".preinit_array"),
  gnu::used]] void (*const record_signals_at_load)(int, char**, char**) = hsdp_record_signals_from_start;

}  // namespace

int main(int argc, char** argv) {
  // Before anything collective: a SIGUSR1 or SIGTERM that lands during start-up is honoured at the first safe point.
  const hsdp::train::StopSignals signals;
  std::set_terminate(end_job_on_local_error);
  hsdp::comm::MpiEnvironment mpi(&argc, &argv);
  const hsdp::Logger log(mpi.world_rank(), hsdp::host_name());
  hsdp::set_stall_handler([&log](const hsdp::StallReport& r) { on_stall(log, r); });
  try {
    return run(argc, argv, log, signals);
  } catch (const hsdp::AgreedError& e) {
    // Every rank has this error; rank 0 says it once.
    if (log.is_root()) {
      // "training diverged at step ..." and "replica check at step ..." say what they are; the other kinds name
      // themselves ("config error: ...").
      const bool says_itself = e.kind() == hsdp::ErrorKind::diverged || e.kind() == hsdp::ErrorKind::replica;
      const std::string kind = says_itself ? "" : std::string(hsdp::to_string(e.kind())) + " error: ";
      std::cerr << ("hsdp-train: " + kind + e.what() + "\n") << std::flush;  // one write: never split by other output
    }
    return e.exit_code();
  }
}
