#include "hsdp/train/checkpointing.hpp"

#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <optional>
#include <sstream>

#include "hsdp/ckpt/commit.hpp"
#include "hsdp/ckpt/inspect.hpp"
#include "hsdp/comm/agree.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/core/stall.hpp"
#include "hsdp/core/timer.hpp"

namespace hsdp::train {

namespace {

// Rank 0's listing of the checkpoints in `dir` (steps, ascending), the same on every rank.
std::vector<std::int64_t> checkpoint_steps(MPI_Comm world, const std::string& dir) {
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  std::vector<std::int64_t> steps;
  if (rank == 0) steps = ckpt::list_checkpoint_steps(dir);
  std::uint64_t count = steps.size();
  MPI_Bcast(&count, 1, MPI_UINT64_T, 0, world);
  steps.resize(count);
  MPI_Bcast(steps.data(), static_cast<int>(count), MPI_INT64_T, 0, world);
  return steps;
}

// The longest existing prefix of `dir` (the directory itself once the first save made it).
std::filesystem::path existing_part(const std::string& dir) {
  std::filesystem::path p = std::filesystem::absolute(dir);
  std::error_code ec;
  while (!std::filesystem::exists(p, ec) && p.has_parent_path() && p != p.parent_path()) p = p.parent_path();
  return p;
}

std::string join(const std::vector<std::string>& parts, const std::string& separator) {
  std::string text;
  for (const auto& p : parts) text += (text.empty() ? "" : separator) + p;
  return text;
}

// A resolved deck as section.key -> value, in order.
std::vector<std::pair<std::string, std::string>> deck_entries(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> entries;
  std::istringstream in(text);
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.size() > 2 && line.front() == '[' && line.back() == ']') {
      section = line.substr(1, line.size() - 2);
    } else if (const std::size_t eq = line.find(" = "); eq != std::string::npos && line[0] != '#') {
      entries.emplace_back(section + "." + line.substr(0, eq), line.substr(eq + 3));
    }
  }
  return entries;
}

// "from this run's deck", or which keys differ.
std::string describe_changes(const std::vector<DeckChange>& changes) {
  if (changes.empty()) return "from this run's deck";
  std::string keys;
  for (std::size_t i = 0; i < changes.size() && i < 4; ++i) keys += (i ? ", " : "") + changes[i].key;
  if (changes.size() > 4) keys += ", ...";
  return "from another deck (" + keys + " differ)";
}

// Whose checkpoints `dir` holds, from its newest one's metadata (rank 0 reads, every rank gets the text): the step,
// when it was written, the ranks and strategy, and whether its deck is this run's (the keys that differ otherwise).
std::string whose_checkpoints(MPI_Comm world, const std::string& dir, std::int64_t newest, const std::string& deck) {
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  std::string text;
  if (rank == 0) {
    const std::string path = (std::filesystem::path(dir) / ckpt::checkpoint_file_name(newest)).string();
    try {
      const ckpt::CheckpointInfo info = ckpt::inspect_checkpoint(path);
      std::error_code ec;
      const auto written = std::filesystem::last_write_time(path, ec);
      std::string when;
      if (!ec) {
        const auto t = std::chrono::system_clock::to_time_t(std::chrono::file_clock::to_sys(written));
        char buffer[32];
        std::strftime(buffer, sizeof buffer, "%Y-%m-%d %H:%M UTC", std::gmtime(&t));
        when = std::string(", written ") + buffer;
      }
      text = "the newest, step " + std::to_string(info.state.step) + when + ", by " +
             std::to_string(info.state.world_size) + " rank(s) with " + info.state.strategy + ", " +
             describe_changes(deck_changes(info.state.deck_text, deck));
    } catch (const Error& e) {
      text = "the newest cannot be read: " + std::string(e.what());
    }
  }
  std::uint64_t size = text.size();
  MPI_Bcast(&size, 1, MPI_UINT64_T, 0, world);
  text.resize(size);
  MPI_Bcast(text.data(), static_cast<int>(size), MPI_CHAR, 0, world);
  return text;
}

}  // namespace

std::vector<DeckChange> deck_changes(const std::string& saved_deck, const std::string& deck) {
  static const std::vector<std::string> kSegmentKeys = {"checkpoint.resume", "checkpoint.overwrite",
                                                        "checkpoint.accept_changes", "train.stop_at_step",
                                                        "train.eval_only"};
  const auto saved = deck_entries(saved_deck);
  std::vector<DeckChange> changes;
  for (const auto& [key, value] : deck_entries(deck)) {
    if (std::find(kSegmentKeys.begin(), kSegmentKeys.end(), key) != kSegmentKeys.end()) continue;
    const auto it = std::find_if(saved.begin(), saved.end(), [&](const auto& e) { return e.first == key; });
    if (it != saved.end() && it->second != value) changes.push_back({key, it->second, value});
  }
  return changes;
}

Checkpointer::Checkpointer(const TrainOptions& options, comm::ProcessMesh& mesh, Backend& backend,
                           const model::ModelLayout& layout, shard::OuterOptimizer* outer, const Logger& log)
    : options_(options), mesh_(mesh), backend_(backend), layout_(layout), outer_(outer), log_(log) {}

Checkpointer::Views Checkpointer::views(bool in_flight) {
  Views v;
  v.inner = backend_.checkpoint_shards();
  if (outer_) v.outer = outer_->state_views();
  if (outer_ && in_flight) v.shift = outer_->shift_views();
  return v;
}

std::vector<ckpt::StateSet> Checkpointer::save_sets(const Views& v, bool in_flight) {
  const bool writer = backend_.is_checkpoint_writer();
  if (mesh_.islands() == 1) return {ckpt::model_state(v.inner, writer)};
  std::vector<ckpt::StateSet> sets;
  const auto mine = [&](int i, const std::vector<ckpt::UnitShard>& views) {
    return i == mesh_.island_index() ? std::span<const ckpt::UnitShard>(views) : std::span<const ckpt::UnitShard>();
  };
  const auto writes = [&](int i) { return writer && i == mesh_.island_index(); };
  for (int i = 0; i < mesh_.islands(); ++i) sets.push_back(ckpt::island_state(i, mine(i, v.inner), writes(i)));
  for (int i = 0; i < mesh_.islands(); ++i) sets.push_back(ckpt::outer_state(i, mine(i, v.outer), writes(i)));
  if (in_flight) {
    for (int i = 0; i < mesh_.islands(); ++i) sets.push_back(ckpt::outer_flight_state(i, mine(i, v.shift), writes(i)));
  }
  return sets;
}

std::vector<ckpt::StateSet> Checkpointer::load_sets(const ckpt::TrainState& saved, const Views& v) {
  const int now = mesh_.islands();
  const int source = mesh_.island_index() % saved.islands;
  // Only the islands some island of this run continues are read (and verified).
  const int read = std::min(saved.islands, now);
  const auto mine = [&](int i, const std::vector<ckpt::UnitShard>& views) {
    return i == source ? std::span<const ckpt::UnitShard>(views) : std::span<const ckpt::UnitShard>();
  };
  std::vector<ckpt::StateSet> sets;
  for (int i = 0; i < read; ++i) sets.push_back(ckpt::island_state(i, mine(i, v.inner), false));
  if (saved.islands > 1 && now > 1) {
    for (int i = 0; i < read; ++i) sets.push_back(ckpt::outer_state(i, mine(i, v.outer), false));
    if (saved.outer_in_flight >= 0) {
      for (int i = 0; i < read; ++i) sets.push_back(ckpt::outer_flight_state(i, mine(i, v.shift), false));
    }
  }
  return sets;
}

bool Checkpointer::due(std::int64_t step) const {
  return enabled() && options_.checkpoint_every > 0 && step % options_.checkpoint_every == 0;
}

ckpt::TrainState Checkpointer::load(const std::string& path) {
  Stopwatch watch;
  Views v;
  ckpt::TrainState state =
      ckpt::load_checkpoint(mesh_.mpi_world().raw(), path, layout_, [&](const ckpt::TrainState& s) {
        v = views(s.islands > 1 && mesh_.islands() > 1 && s.outer_in_flight >= 0);
        return load_sets(s, v);
      });
  backend_.checkpoint_loaded();
  log_.info("resumed from ", path, " (step ", state.step, ", saved by ", state.world_size, " rank(s) with ",
            state.strategy, state.islands > 1 ? " in " + std::to_string(state.islands) + " islands" : std::string(),
            ") in ", watch.seconds(), " s");
  const int now = mesh_.islands();
  if (state.islands > 1 && now != state.islands) {
    log_.info("resume: the checkpoint holds ", state.islands, " islands, this run has ", now, ": ",
              now == 1 ? std::string("it continues island 0's model and AdamW state; the outer parameters and "
                                     "momentum are dropped (one island has no outer step)")
                       : "island j continues island j mod " + std::to_string(state.islands) +
                             "'s model, AdamW state and outer state (outer parameters, momentum, error feedback)",
              now >= state.islands ? std::string()
              : now + 1 == state.islands
                  ? "; what island " + std::to_string(now) + " trained since its last outer step is dropped"
                  : "; what islands " + std::to_string(now) + " to " + std::to_string(state.islands - 1) +
                        " trained since their last outer step is dropped");
  }
  if (state.islands > 1 && outer_) {
    // The exchange in flight at the save is in flight again, applied after the step the checkpoint names.
    outer_->resume_flight({state.outer_in_flight, state.outer_apply_step});
  } else if (state.outer_in_flight >= 0) {
    log_.info("resume: the outer exchange of fragment ", state.outer_in_flight, " in flight at step ", state.step,
              " is dropped (one island has no outer step)");
  }
  if (state.islands == 1 && outer_) {
    // A run of one island (or a model imported) continued by islands: they start from its model.
    outer_->reset(backend_.checkpoint_shards());
    log_.info("resume: the checkpoint is of one island: each of the ", now,
              " islands starts from its model, which is also the outer parameters; the outer momentum starts at 0");
  }
  return state;
}

std::optional<ckpt::TrainState> Checkpointer::resume() {
  const StallPhase phase("resume", options_.checkpoint_timeout_s, "checkpoint.timeout_s");
  const MPI_Comm world = mesh_.mpi_world().raw();
  if (enabled() && !options_.eval_only) {
    // A checkpoint.dir that cannot hold checkpoints (a file, /dev/null, no permission) is found now, not after the
    // first stretch of training.
    const StallGuard op("creating " + options_.checkpoint_dir);
    comm::agree(world, [&] {
      if (mesh_.world().rank() != 0) return;
      std::error_code ec;
      std::filesystem::create_directories(options_.checkpoint_dir, ec);
      if (ec || !std::filesystem::is_directory(options_.checkpoint_dir)) {
        throw_config("checkpoint.dir '" + options_.checkpoint_dir + "' cannot be a checkpoint directory: " +
                     (ec ? ec.message() : "it exists and is not a directory"));
      }
      // A directory the job cannot write (a read-only file system, no permission): said before any step is spent.
      const std::string probe = options_.checkpoint_dir + "/.hsdp_write_probe." + std::to_string(::getpid());
      const int fd = ::open(probe.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
      if (fd < 0) {
        throw_config("checkpoint.dir '" + options_.checkpoint_dir + "' is not writable: " + std::strerror(errno) +
                     " (the first checkpoint would fail after checkpoint.every steps)");
      }
      ::close(fd);
      ::unlink(probe.c_str());
    });
  }
  // Reading `latest`, listing the directory, loading: each rank waits in MPI while rank 0 reads the file system.
  const StallGuard op("finding and loading the checkpoint to resume");
  std::optional<std::string> from;
  std::optional<ckpt::TrainState> state;
  if (options_.resume == "auto" && options_.checkpoint_fallback && enabled()) {
    state = resume_newest_loadable(from);
  } else {
    from = ckpt::resolve_resume(world, options_.checkpoint_dir, options_.resume);
    if (from) state = load(*from);
  }
  if (enabled() && !options_.eval_only) keep_runs_apart(from);
  if (state) latest_step_ = state->step;
  return state;
}

// `latest` first; when it is damaged (names a missing file, or its checkpoint does not load: a failed checksum, a
// truncated file), the other checkpoints of the directory up to its step, newest first. Every rank sees the same errors
// (the ckpt layer agrees on them before throwing), so every rank takes the same path.
std::optional<ckpt::TrainState> Checkpointer::resume_newest_loadable(std::optional<std::string>& from) {
  const MPI_Comm world = mesh_.mpi_world().raw();
  const std::string& dir = options_.checkpoint_dir;
  std::vector<std::string> candidates, skipped;
  // Only errors every rank has (AgreedError: the ckpt layer agrees on its failures) are skipped over; any other is
  // one rank's and ends the job where it is thrown.
  try {
    if (const auto latest = ckpt::resolve_resume(world, dir, "auto")) candidates.push_back(*latest);
  } catch (const AgreedError& e) {
    if (e.kind() != ErrorKind::checkpoint) throw;
    skipped.push_back(e.what());
  }
  if (candidates.empty() && skipped.empty()) return std::nullopt;  // no `latest`: nothing of this run to resume
  std::vector<std::int64_t> steps = checkpoint_steps(world, dir);
  std::sort(steps.rbegin(), steps.rend());
  // Where `latest` names a step, none after it: those are an earlier branch of the run (it resumed from an older
  // checkpoint since), which a fallback must not switch to.
  const std::optional<std::int64_t> latest_step =
      candidates.empty() ? std::nullopt
                         : ckpt::step_of_file_name(std::filesystem::path(candidates.front()).filename().string());
  for (const std::int64_t step : steps) {
    if (latest_step && step > *latest_step) continue;
    const std::string path = (std::filesystem::path(dir) / ckpt::checkpoint_file_name(step)).string();
    if (candidates.empty() || path != candidates.front()) candidates.push_back(path);
  }
  for (const std::string& path : candidates) {
    bool failed = false;
    std::optional<ckpt::TrainState> state;
    try {
      state = load(path);
    } catch (const AgreedError& e) {
      if (e.kind() != ErrorKind::checkpoint) throw;
      failed = true;
      skipped.push_back(path + ": " + e.what());
    }
    int failures = failed ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, world);
    if (failures != 0 && failures != mesh_.world().size()) {
      throw_internal("resume: loading " + path + " failed on " + std::to_string(failures) + " of " +
                     std::to_string(mesh_.world().size()) + " ranks");
    }
    if (failed) continue;
    if (!skipped.empty()) {
      log_.warn("resume: skipped ", join(skipped, "; "), "; resumed from ", path,
                " instead (checkpoint.fallback=false makes this an error)");
    }
    from = path;
    return state;
  }
  throw AgreedError(ErrorKind::checkpoint, "checkpoint.resume=auto: no checkpoint of '" + dir + "' loads: " +
                                               join(skipped, "; "));
}

// A run writes into checkpoint.dir only when the checkpoints there are its own: those it resumed from. Otherwise
// retention and `latest` would mix two runs; checkpoint.overwrite=true deletes the others first.
void Checkpointer::keep_runs_apart(const std::optional<std::string>& from) {
  const MPI_Comm world = mesh_.mpi_world().raw();
  const std::string& dir = options_.checkpoint_dir;
  namespace fs = std::filesystem;
  if (from) {
    // Rank 0 decides, for every rank: a file system that answers one node otherwise (a stale handle) must not send
    // some ranks into checkpoint_steps' collective and the others on.
    int rank = 0;
    MPI_Comm_rank(world, &rank);
    int own = 0;
    if (rank == 0) {
      std::error_code ec;
      const fs::path source = fs::absolute(fs::path(*from), ec).parent_path();
      own = fs::equivalent(source, fs::path(dir), ec) ? 1 : 0;
    }
    MPI_Bcast(&own, 1, MPI_INT, 0, world);
    if (own) return;  // continuing the directory's own run
  }
  const std::vector<std::int64_t> steps = checkpoint_steps(world, dir);
  if (steps.empty()) return;
  const StallGuard op("checking " + dir + " for another run's checkpoints");
  std::string names;
  for (std::size_t i = 0; i < steps.size() && i < 3; ++i) names += (i ? ", " : "") + ("step_" + std::to_string(steps[i]) + ".h5");
  if (steps.size() > 3) names += ", ...";
  names += "; " + whose_checkpoints(world, dir, steps.back(), options_.deck_text);
  if (!options_.checkpoint_overwrite) {
    const std::string how = options_.resume == "auto"
                                ? "it has no `latest` to resume from: resume one with checkpoint.resume=<file>"
                                : "resume it with checkpoint.resume=auto";
    // Every rank has the same listing (rank 0's, broadcast).
    throw AgreedError(ErrorKind::config,
                      "checkpoint.dir '" + dir + "' holds " + std::to_string(steps.size()) + " checkpoint(s) (" +
                          names +
                          ") and this run does not resume from them "
                          "(checkpoint.resume=" +
                          options_.resume + "): " + how +
                          ", choose another checkpoint.dir, or set checkpoint.overwrite=true to delete them");
  }
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  if (rank == 0) ckpt::remove_checkpoints(dir);
  MPI_Barrier(world);
  log_.warn("checkpoint.overwrite=true and checkpoint.resume=", options_.resume, ": deleted the ", steps.size(),
            " checkpoint(s) in ", dir, " (", names, ")");
}

bool Checkpointer::save(ckpt::TrainState state) {
  const StallPhase phase("checkpoint save of step " + std::to_string(state.step), options_.checkpoint_timeout_s,
                         "checkpoint.timeout_s");
  const comm::Topology& topo = mesh_.world_topology();
  state.deck_text = options_.deck_text;
  state.strategy = shard::to_string(options_.engine.strategy);
  state.world_size = topo.world_size;
  state.nodes = topo.num_nodes();
  std::ostringstream mesh;
  mesh << topo.num_nodes() << " node(s) of " << topo.node_size(topo.node()) << " rank(s)"
       << (topo.emulated ? std::string(" (emulated, ") + comm::to_string(topo.placement) + ")" : "");
  state.mesh = mesh.str();
  state.islands = mesh_.islands();
  if (outer_) {
    // An exchange in flight is completed and its shift computed (no bit of the run changes: shard/outer.hpp).
    outer_->settle();
    state.outer_in_flight = outer_->in_flight().fragment;
    state.outer_apply_step = outer_->in_flight().apply_step;
  }
  ckpt::SaveOptions save_options;
  save_options.keep = options_.checkpoint_keep;
  save_options.keep_every = options_.checkpoint_keep_every;
  save_options.logger = &log_;
  bool committed = false;
  save_options.committed = &committed;
  Stopwatch watch;
  ckpt::SaveResult result;
  try {
    {
      const StallGuard op("checking the free space of " + options_.checkpoint_dir);
      check_free_space(state.step);
    }
    const bool in_flight = state.outer_in_flight >= 0;
    const Views v = views(in_flight);  // the sets hold spans of it
    const std::vector<ckpt::StateSet> sets = save_sets(v, in_flight);
    result = ckpt::save_checkpoint(mesh_.mpi_world().raw(), options_.checkpoint_dir, layout_, sets, state,
                                   save_options);
  } catch (const AgreedError& e) {
    // Every rank has it (the ckpt layer agrees on its failures), so every rank takes the same path.
    if (e.kind() != ErrorKind::checkpoint) throw;
    return save_failed(state.step, e.what(), committed);
  }
  const double seconds = watch.seconds();
  latest_step_ = state.step;
  // The file's size, as `hsdp-ckpt inspect` prints it, and what of it is tensor data.
  std::error_code ec;
  const auto file_bytes = std::filesystem::file_size(result.path, ec);
  const auto mib = [](double bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f MiB", bytes / (1024.0 * 1024.0));
    return std::string(text);
  };
  log_.info("checkpoint ", result.path, ": ", ec ? std::string("?") : mib(static_cast<double>(file_bytes)), " (",
            mib(static_cast<double>(result.tensor_bytes)), " of parameters and AdamW state) in ", seconds, " s");
  return true;
}

// A save that failed on every rank (a full disk, a quota, a permission): the half-written step_<N>.h5.tmp goes, the
// previous checkpoint and `latest` were never touched. One line, then stop (exit 2) or, with
// checkpoint.on_error=continue, train on (said for the first failure only).
// The file's tensor data (parameters, m and v in fp32): what a checkpoint needs at least (HDF5's metadata and
// alignment come on top).
std::uint64_t Checkpointer::bytes_needed() const {
  const std::uint64_t sets = mesh_.islands() == 1 ? 1 : 2 * static_cast<std::uint64_t>(mesh_.islands());
  return sets * 3 * sizeof(float) * layout_.total_numel();
}

// Refuses a save the file system certainly cannot hold, before anything is written (a write that fails half-way
// leaves MPI-IO's own complaints on stderr). Quotas are not seen here: they fail in the write, which is agreed too.
void Checkpointer::check_free_space(std::int64_t step) const {
  comm::agree(mesh_.mpi_world().raw(), [&] {
    if (mesh_.world().rank() != 0) return;
    std::error_code ec;
    const std::filesystem::space_info space = std::filesystem::space(existing_part(options_.checkpoint_dir), ec);
    if (!ec && space.available < bytes_needed()) {
      throw Error(ErrorKind::checkpoint, "not enough free space for " + ckpt::checkpoint_file_name(step));
    }
  });
}

bool Checkpointer::save_failed(std::int64_t step, const std::string& error, bool committed) {
  namespace fs = std::filesystem;
  const std::string& dir = options_.checkpoint_dir;
  const std::string name = ckpt::checkpoint_file_name(step);
  int latest_is_this = 0;  // retention failed after `latest` named the new file
  if (mesh_.world().rank() == 0) {
    // What this save left: its temporary file, or (committed) its renamed file when `latest` could not be pointed at
    // it. A file of that name that this save did not write (an earlier run's, resumed from an older step) stays.
    std::error_code ec;
    fs::remove(fs::path(dir) / (name + ".tmp"), ec);
    std::optional<std::string> latest;
    try {
      latest = ckpt::read_latest(dir);
    } catch (const Error&) {  // unreadable: it does not name this save's file
    }
    latest_is_this = committed && latest == name ? 1 : 0;
    if (committed && !latest_is_this) fs::remove(fs::path(dir) / name, ec);
  }
  MPI_Bcast(&latest_is_this, 1, MPI_INT, 0, mesh_.mpi_world().raw());
  if (latest_is_this) latest_step_ = step;
  std::error_code ec;
  const fs::space_info space = fs::space(existing_part(dir), ec);
  std::ostringstream text;
  text.precision(4);
  text << "checkpoint.dir '" << dir << "': cannot write " << name << " (it needs at least "
       << static_cast<double>(bytes_needed()) / (1024.0 * 1024.0) << " MiB";
  if (!ec) text << "; " << static_cast<double>(space.available) / (1024.0 * 1024.0) << " MiB are free";
  text << "): " << error;
  if (latest_is_this) {
    text << "; " << name << " was written and `latest` names it (what failed came after: removing older checkpoints)";
  } else {
    text << "; the previous checkpoint";
    if (latest_step_ > 0) text << " (step " << latest_step_ << ")";
    text << " and `latest` are unchanged";
  }
  if (!options_.checkpoint_continue_on_error) {
    throw AgreedError(ErrorKind::checkpoint,
                      text.str() + "; make room there, or set checkpoint.on_error=continue to train on without it");
  }
  if (!said_save_failure_) {
    log_.warn(text.str(), "; training goes on (checkpoint.on_error=continue): this and every later checkpoint that "
                          "fails is skipped, said this once");
    said_save_failure_ = true;
  }
  return false;
}

}  // namespace hsdp::train
