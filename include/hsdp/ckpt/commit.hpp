#pragma once
// The single-process steps of committing a checkpoint (run by rank 0 after the collective close): durable renames,
// the `latest` pointer, and retention. Each throws a checkpoint Error naming the path on failure.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hsdp::ckpt {

// open + fsync + close.
void fsync_file(const std::string& path);
// fsync of a directory, so that renames and creations in it are durable.
void fsync_directory(const std::string& dir);
// rename(from, to) then fsync of to's directory.
void durable_rename(const std::string& from, const std::string& to);

// Writes `<dir>/latest.tmp` holding `file_name` and a newline, fsyncs it, renames it to `<dir>/latest`, fsyncs dir.
void write_latest(const std::string& dir, const std::string& file_name);
// The file name `<dir>/latest` holds (trimmed), or nothing when there is no `latest`.
std::optional<std::string> read_latest(const std::string& dir);

// Steps of the committed checkpoints (`step_<N>.h5`) in `dir`, ascending.
std::vector<std::int64_t> list_checkpoint_steps(const std::string& dir);
// The step a checkpoint file name stands for ("step_12.h5" -> 12), or nothing.
std::optional<std::int64_t> step_of_file_name(const std::string& file_name);

// Retention: which of `steps` to delete, given the step `latest` names (the run's newest). Only this run's
// checkpoints are candidates, those up to latest_step: a higher step in the directory belongs to another run and is
// neither deleted nor counted, so it can never push out this run's own. Kept: the `keep` highest candidates (all when
// keep <= 0), every multiple of keep_every (if > 0), and the one `latest` names, always.
std::vector<std::int64_t> steps_to_delete(const std::vector<std::int64_t>& steps, std::int64_t latest_step, int keep,
                                          int keep_every);

// Deletes the checkpoints retention drops and leftover `step_<N>.h5.tmp` files of crashed saves (call only after
// `latest` points at the new checkpoint). Returns the paths deleted.
std::vector<std::string> apply_retention(const std::string& dir, std::int64_t latest_step, int keep, int keep_every);

// Deletes every checkpoint of `dir` (`step_<N>.h5`, leftover `.h5.tmp`, `latest`): checkpoint.overwrite. Returns the
// paths deleted.
std::vector<std::string> remove_checkpoints(const std::string& dir);

}  // namespace hsdp::ckpt
