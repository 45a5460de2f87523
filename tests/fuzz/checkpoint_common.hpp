#pragma once
// What the two checkpoint harnesses share (checkpoint_harness.cpp: the file's bytes mutated;
// checkpoint_meta_harness.cpp: its metadata values edited): the fuzz model, the tensor comparison with the reference,
// and a reader's run that also checks that it left no HDF5 file or object open.
#include <hdf5.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "harness.hpp"
#include "hsdp/ckpt/inspect.hpp"
#include "hsdp/model/config.hpp"

namespace hsdp::fuzz {

// The fuzz model: tests/fuzz/make_fixtures.sh trains the seed checkpoint with exactly this shape.
inline model::GptConfig checkpoint_fuzz_model() {
  model::GptConfig c;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 16;
  c.block_size = 16;
  c.vocab_size = 64;
  c.padded_vocab_size = 64;
  return c;
}

inline bool same_tensors(const ckpt::FullCheckpoint& a, const ckpt::FullCheckpoint& b) {
  const auto same = [](const auto& x, const auto& y) {
    if (x.size() != y.size()) return false;
    for (std::size_t u = 0; u < x.size(); ++u) {
      if (x[u].size() != y[u].size() || std::memcmp(x[u].data(), y[u].data(), x[u].size() * sizeof(float)) != 0) {
        return false;
      }
    }
    return true;
  };
  return same(a.params, b.params) && same(a.exp_avg, b.exp_avg) && same(a.exp_avg_sq, b.exp_avg_sq);
}

// Runs one reader, then checks that it left no HDF5 identifier open (and closes what it left, so that the next input
// starts clean): a leaked handle keeps the file's metadata cached, and a later open of the same file (a retry, a
// fallback to another checkpoint in the same process) would read through it.
inline Outcome run_checkpoint_reader(const std::function<void()>& reader, const char* name) {
  Outcome outcome = run_classified(reader);
  const ssize_t left_open = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
  if (left_open > 0) {
    std::vector<hid_t> ids(static_cast<std::size_t>(left_open));
    H5Fget_obj_ids(H5F_OBJ_ALL, H5F_OBJ_ALL, ids.size(), ids.data());
    for (const hid_t id : ids) {
      if (H5Iget_type(id) == H5I_FILE) {
        H5Fclose(id);
      } else {
        H5Oclose(id);
      }
    }
    outcome =
        worse(outcome, {Verdict::failure, "property:hdf5_objects_left_open",
                        std::string(name) + " left " + std::to_string(left_open) +
                            " HDF5 file(s) or object(s) open after: " + outcome.category + ": " + outcome.detail});
  }
  return outcome;
}

}  // namespace hsdp::fuzz
