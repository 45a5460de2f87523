#include "meta.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "h5.hpp"
#include "hsdp/ckpt/checksum.hpp"
#include "hsdp/core/error.hpp"

namespace hsdp::ckpt::meta {
namespace {

h5::Handle open_group(hid_t file, const std::string& name, const std::string& path) {
  if (H5Lexists(file, name.c_str(), H5P_DEFAULT) <= 0) {
    throw Error(ErrorKind::checkpoint, "checkpoint '" + path + "' has no group " + name);
  }
  return h5::group(H5Gopen2(file, name.c_str(), H5P_DEFAULT), "checkpoint '" + path + "': opening " + name);
}

h5::Handle create_group(hid_t file, const char* name) {
  return h5::group(H5Gcreate2(file, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), std::string("creating ") + name);
}

int to_int(std::int64_t value, const std::string& what) {
  if (value < INT32_MIN || value > INT32_MAX) throw Error(ErrorKind::checkpoint, what + " is out of range");
  return static_cast<int>(value);
}

// Strings and numbers of the state, packed for one broadcast.
void append(std::vector<char>& out, const void* data, std::size_t bytes) {
  const char* p = static_cast<const char*>(data);
  out.insert(out.end(), p, p + bytes);
}
void append(std::vector<char>& out, const std::string& text) {
  const std::uint64_t n = text.size();
  append(out, &n, sizeof n);
  append(out, text.data(), text.size());
}
void take(const std::vector<char>& in, std::size_t& at, void* data, std::size_t bytes) {
  std::memcpy(data, in.data() + at, bytes);
  at += bytes;
}
void take(const std::vector<char>& in, std::size_t& at, std::string& text) {
  std::uint64_t n = 0;
  take(in, at, &n, sizeof n);
  text.assign(in.data() + at, n);
  at += n;
}

// Every value of the state a resume relies on, in a fixed order (what the broadcast sends; the checksum covers it
// with the model's shape).
std::vector<char> pack(const TrainState& s, bool with_tokenizer = true) {
  std::vector<char> packed;
  append(packed, &s.step, sizeof s.step);
  append(packed, &s.tokens, sizeof s.tokens);
  append(packed, &s.sampler.epoch, sizeof s.sampler.epoch);
  append(packed, &s.sampler.position, sizeof s.sampler.position);
  append(packed, &s.scaler.scale, sizeof s.scaler.scale);
  append(packed, &s.scaler.good_steps, sizeof s.scaler.good_steps);
  append(packed, &s.scaler.skipped_steps, sizeof s.scaler.skipped_steps);
  append(packed, &s.world_size, sizeof s.world_size);
  append(packed, &s.nodes, sizeof s.nodes);
  append(packed, &s.train_seconds, sizeof s.train_seconds);
  append(packed, &s.segments, sizeof s.segments);
  append(packed, s.deck_text);
  append(packed, s.strategy);
  append(packed, s.mesh);
  // Islands came later: a file of one island packs (and checksums) as files did before them.
  if (s.islands > 1) append(packed, &s.islands, sizeof s.islands);
  if (s.outer_in_flight >= 0) {  // only with islands
    append(packed, &s.outer_in_flight, sizeof s.outer_in_flight);
    append(packed, &s.outer_apply_step, sizeof s.outer_apply_step);
  }
  // The tokenizer came later still: a file of bytes packs as before (the broadcast sends it on its own).
  if (with_tokenizer && s.tokenizer != "bytes") append(packed, s.tokenizer);
  // The data's window count later again: checksummed when recorded (the broadcast sends it on its own too).
  if (with_tokenizer && s.data_windows > 0) append(packed, &s.data_windows, sizeof s.data_windows);
  // And the segment's global batch, the same way.
  if (with_tokenizer && s.tokens_per_step > 0) append(packed, &s.tokens_per_step, sizeof s.tokens_per_step);
  return packed;
}

}  // namespace

// The tensors' hsdp-sum64 applied to 8-byte words: sum over words w_i (the last zero-padded) of
// splitmix64(i * golden + w_i), mod 2^64. Any change of one word changes it.
std::uint64_t checksum(const TrainState& s, const model::GptConfig& c) {
  std::vector<char> bytes = pack(s);
  for (const int v : {c.n_layer, c.n_head, c.n_embd, c.block_size, c.vocab_size, c.padded_vocab_size}) {
    append(bytes, &v, sizeof v);
  }
  if (c.llama()) {  // a GPT-2 checkpoint's sum is as before the Llama keys existed
    for (const int v : {1, c.n_kv_head, c.ffn_dim, c.tie_embeddings ? 1 : 0}) append(bytes, &v, sizeof v);
    for (const double v : {c.rope_theta, c.norm_eps}) append(bytes, &v, sizeof v);
  }
  bytes.resize((bytes.size() + 7) / 8 * 8, '\0');
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < bytes.size() / 8; ++i) {
    std::uint64_t word = 0;
    std::memcpy(&word, bytes.data() + 8 * i, 8);
    std::uint64_t z = i * 0x9E3779B97F4A7C15ull + word;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    sum += z ^ (z >> 31);
  }
  return sum;
}

namespace {

// Values no writer produces: refused even in files from before the metadata checksum.
void check_ranges(const TrainState& s, const std::string& path) {
  const auto bad = [&](const std::string& what) {
    throw Error(ErrorKind::checkpoint, "checkpoint '" + path + "': " + what + " (an edited or damaged file)");
  };
  if (s.step < 0) bad("/meta step " + std::to_string(s.step) + " is negative");
  if (s.tokens < 0) bad("/meta tokens " + std::to_string(s.tokens) + " is negative");
  if (s.tokens_per_step < 0) bad("/meta tokens_per_step " + std::to_string(s.tokens_per_step) + " is negative");
  if (s.world_size < 1) bad("/meta world_size " + std::to_string(s.world_size) + " is below 1");
  if (s.nodes < 1 || s.nodes > s.world_size) {
    bad("/meta nodes " + std::to_string(s.nodes) + " is not in [1, world_size " + std::to_string(s.world_size) + "]");
  }
  if (s.islands < 1) bad("/meta islands " + std::to_string(s.islands) + " is below 1");
  if (s.outer_in_flight >= 0 && (s.islands < 2 || s.outer_apply_step <= s.step)) {
    bad("/meta outer_in_flight " + std::to_string(s.outer_in_flight) + " needs islands > 1 and an outer_apply_step " +
        "after step " + std::to_string(s.step));
  }
  if (s.segments < 1) bad("/meta segments " + std::to_string(s.segments) + " is below 1");
  if (!(s.train_seconds >= 0) || !std::isfinite(s.train_seconds)) bad("/meta train_seconds is not a finite number >= 0");
  if (!(s.scaler.scale > 0) || !std::isfinite(s.scaler.scale)) bad("/scaler scale is not a finite number > 0");
  if (s.scaler.good_steps < 0 || s.scaler.skipped_steps < 0) bad("/scaler good_steps or skipped_steps is negative");
}

}  // namespace

void write(hid_t file, const TrainState& s, const model::GptConfig& config) {
  h5::Handle m = create_group(file, "/meta");
  h5::write_attribute(m.get(), "format_version", std::int64_t{kFormatVersion});
  h5::write_attribute(m.get(), "step", s.step);
  h5::write_attribute(m.get(), "tokens", s.tokens);
  if (s.tokens_per_step > 0) h5::write_attribute(m.get(), "tokens_per_step", s.tokens_per_step);
  h5::write_attribute(m.get(), "deck", s.deck_text);
  h5::write_attribute(m.get(), "strategy", s.strategy);
  h5::write_attribute(m.get(), "world_size", std::int64_t{s.world_size});
  h5::write_attribute(m.get(), "nodes", std::int64_t{s.nodes});
  h5::write_attribute(m.get(), "mesh", s.mesh);
  h5::write_attribute(m.get(), "train_seconds", s.train_seconds);
  h5::write_attribute(m.get(), "segments", s.segments);
  if (s.islands > 1) h5::write_attribute(m.get(), "islands", std::int64_t{s.islands});
  if (s.outer_in_flight >= 0) {
    h5::write_attribute(m.get(), "outer_in_flight", std::int64_t{s.outer_in_flight});
    h5::write_attribute(m.get(), "outer_apply_step", s.outer_apply_step);
  }
  h5::write_attribute(m.get(), "tokenizer", s.tokenizer);
  h5::write_attribute(m.get(), "hsdp_version", std::string(HSDP_VERSION));
  h5::write_attribute(m.get(), "checksum_algorithm", std::string(kChecksumAlgorithm));
  h5::write_attribute(m.get(), "n_layer", std::int64_t{config.n_layer});
  h5::write_attribute(m.get(), "n_head", std::int64_t{config.n_head});
  h5::write_attribute(m.get(), "n_embd", std::int64_t{config.n_embd});
  h5::write_attribute(m.get(), "block_size", std::int64_t{config.block_size});
  h5::write_attribute(m.get(), "vocab_size", std::int64_t{config.vocab_size});
  h5::write_attribute(m.get(), "padded_vocab_size", std::int64_t{config.padded_vocab_size});
  if (config.llama()) {  // absent: GPT-2 (every checkpoint before model.arch existed)
    h5::write_attribute(m.get(), "arch", std::string(model::arch_name(config.arch)));
    h5::write_attribute(m.get(), "n_kv_head", std::int64_t{config.n_kv_head});
    h5::write_attribute(m.get(), "ffn_dim", std::int64_t{config.ffn_dim});
    h5::write_attribute(m.get(), "rope_theta", config.rope_theta);
    h5::write_attribute(m.get(), "norm_eps", config.norm_eps);
    h5::write_attribute(m.get(), "tie_embeddings", std::int64_t{config.tie_embeddings ? 1 : 0});
  }
  h5::write_attribute(m.get(), "meta_checksum", checksum(s, config));

  h5::Handle d = create_group(file, "/data");
  h5::write_attribute(d.get(), "epoch", static_cast<std::uint64_t>(s.sampler.epoch));
  h5::write_attribute(d.get(), "position", static_cast<std::uint64_t>(s.sampler.position));
  if (s.data_windows > 0) h5::write_attribute(d.get(), "windows", s.data_windows);

  h5::Handle sc = create_group(file, "/scaler");
  h5::write_attribute(sc.get(), "scale", static_cast<double>(s.scaler.scale));
  h5::write_attribute(sc.get(), "good_steps", s.scaler.good_steps);
  h5::write_attribute(sc.get(), "skipped_steps", s.scaler.skipped_steps);
}

int read_format_version(hid_t file, const std::string& path) {
  h5::Handle m = open_group(file, "/meta", path);
  const std::string where = "checkpoint '" + path + "' /meta";
  const std::int64_t version = h5::read_int_attribute(m.get(), "format_version", where);
  if (version < 1 || version > kFormatVersion) {
    throw Error(ErrorKind::checkpoint, "checkpoint '" + path + "' has format_version " + std::to_string(version) +
                                           "; this hsdp (" HSDP_VERSION ") reads versions 1 to " +
                                           std::to_string(kFormatVersion));
  }
  return static_cast<int>(version);
}

TrainState read_values(hid_t file, const std::string& path) {
  read_format_version(file, path);
  TrainState s;
  {
    h5::Handle m = open_group(file, "/meta", path);
    const std::string where = "checkpoint '" + path + "' /meta";
    s.step = h5::read_int_attribute(m.get(), "step", where);
    s.tokens = h5::read_int_attribute(m.get(), "tokens", where);
    if (h5::has_attribute(m.get(), "tokens_per_step")) {
      s.tokens_per_step = h5::read_int_attribute(m.get(), "tokens_per_step", where);
    }
    s.deck_text = h5::read_string_attribute(m.get(), "deck", where);
    s.strategy = h5::read_string_attribute(m.get(), "strategy", where);
    s.world_size = to_int(h5::read_int_attribute(m.get(), "world_size", where), where + " world_size");
    s.nodes = to_int(h5::read_int_attribute(m.get(), "nodes", where), where + " nodes");
    s.mesh = h5::read_string_attribute(m.get(), "mesh", where);
    // Added after format 1's first files: absent in those, which then count from this segment on.
    if (h5::has_attribute(m.get(), "train_seconds")) s.train_seconds = h5::read_real_attribute(m.get(), "train_seconds", where);
    if (h5::has_attribute(m.get(), "segments")) s.segments = h5::read_int_attribute(m.get(), "segments", where);
    if (h5::has_attribute(m.get(), "islands")) {
      s.islands = to_int(h5::read_int_attribute(m.get(), "islands", where), where + " islands");
    }
    if (h5::has_attribute(m.get(), "outer_in_flight")) {
      s.outer_in_flight =
          to_int(h5::read_int_attribute(m.get(), "outer_in_flight", where), where + " outer_in_flight");
      s.outer_apply_step = h5::read_int_attribute(m.get(), "outer_apply_step", where);
    }
    if (h5::has_attribute(m.get(), "tokenizer")) s.tokenizer = h5::read_string_attribute(m.get(), "tokenizer", where);
  }
  {
    h5::Handle d = open_group(file, "/data", path);
    const std::string where = "checkpoint '" + path + "' /data";
    s.sampler.epoch = h5::read_uint_attribute(d.get(), "epoch", where);
    s.sampler.position = h5::read_uint_attribute(d.get(), "position", where);
    if (h5::has_attribute(d.get(), "windows")) s.data_windows = h5::read_uint_attribute(d.get(), "windows", where);
  }
  {
    h5::Handle sc = open_group(file, "/scaler", path);
    const std::string where = "checkpoint '" + path + "' /scaler";
    s.scaler.scale = static_cast<float>(h5::read_real_attribute(sc.get(), "scale", where));
    s.scaler.good_steps = h5::read_int_attribute(sc.get(), "good_steps", where);
    s.scaler.skipped_steps = h5::read_int_attribute(sc.get(), "skipped_steps", where);
  }
  return s;
}

TrainState read_state(hid_t file, const std::string& path) {
  const TrainState s = read_values(file, path);
  check_ranges(s, path);
  // Files written since the checksum covers the metadata: every value above and the model's shape as written.
  h5::Handle m = open_group(file, "/meta", path);
  if (h5::has_attribute(m.get(), "meta_checksum")) {
    const std::string where = "checkpoint '" + path + "' /meta";
    const std::uint64_t stored = h5::read_uint_attribute(m.get(), "meta_checksum", where);
    if (stored != checksum(s, read_model_config(file, path))) {
      throw Error(ErrorKind::checkpoint, where + ": the step, data position, loss scaler, deck or model attributes "
                                                 "do not match meta_checksum (edited or damaged): step " +
                                                 std::to_string(s.step) + " cannot be trusted");
    }
  }
  return s;
}

model::GptConfig read_model_config(hid_t file, const std::string& path) {
  h5::Handle m = open_group(file, "/meta", path);
  const std::string where = "checkpoint '" + path + "' /meta";
  const auto get = [&](const char* key) { return to_int(h5::read_int_attribute(m.get(), key, where), where + key); };
  model::GptConfig c;
  c.n_layer = get("n_layer");
  c.n_head = get("n_head");
  c.n_embd = get("n_embd");
  c.block_size = get("block_size");
  c.vocab_size = get("vocab_size");
  c.padded_vocab_size = get("padded_vocab_size");
  try {
    if (h5::has_attribute(m.get(), "arch")) {
      c.arch = model::parse_arch(h5::read_string_attribute(m.get(), "arch", where));
      c.n_kv_head = get("n_kv_head");
      c.ffn_dim = get("ffn_dim");
      c.rope_theta = h5::read_real_attribute(m.get(), "rope_theta", where);
      c.norm_eps = h5::read_real_attribute(m.get(), "norm_eps", where);
      c.tie_embeddings = get("tie_embeddings") != 0;
    }
    c.validate();
  } catch (const Error& e) {
    throw Error(ErrorKind::checkpoint, where + " describes an impossible model: " + e.what());
  }
  return c;
}

TrainState broadcast(MPI_Comm comm, const TrainState& state) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::vector<char> packed;
  if (rank == 0) packed = pack(state, false);
  std::uint64_t bytes = packed.size();
  MPI_Bcast(&bytes, 1, MPI_UINT64_T, 0, comm);
  packed.resize(bytes);
  MPI_Bcast(packed.data(), static_cast<int>(bytes), MPI_CHAR, 0, comm);
  std::uint64_t tokenizer_bytes = state.tokenizer.size();
  MPI_Bcast(&tokenizer_bytes, 1, MPI_UINT64_T, 0, comm);
  std::string tokenizer(tokenizer_bytes, '\0');
  if (rank == 0) tokenizer = state.tokenizer;
  MPI_Bcast(tokenizer.data(), static_cast<int>(tokenizer_bytes), MPI_CHAR, 0, comm);
  std::uint64_t data_windows = state.data_windows;
  MPI_Bcast(&data_windows, 1, MPI_UINT64_T, 0, comm);
  std::int64_t tokens_per_step = state.tokens_per_step;
  MPI_Bcast(&tokens_per_step, 1, MPI_INT64_T, 0, comm);
  if (rank == 0) return state;
  TrainState s;
  s.tokenizer = tokenizer;
  s.data_windows = data_windows;
  s.tokens_per_step = tokens_per_step;
  std::size_t at = 0;
  take(packed, at, &s.step, sizeof s.step);
  take(packed, at, &s.tokens, sizeof s.tokens);
  take(packed, at, &s.sampler.epoch, sizeof s.sampler.epoch);
  take(packed, at, &s.sampler.position, sizeof s.sampler.position);
  take(packed, at, &s.scaler.scale, sizeof s.scaler.scale);
  take(packed, at, &s.scaler.good_steps, sizeof s.scaler.good_steps);
  take(packed, at, &s.scaler.skipped_steps, sizeof s.scaler.skipped_steps);
  take(packed, at, &s.world_size, sizeof s.world_size);
  take(packed, at, &s.nodes, sizeof s.nodes);
  take(packed, at, &s.train_seconds, sizeof s.train_seconds);
  take(packed, at, &s.segments, sizeof s.segments);
  take(packed, at, s.deck_text);
  take(packed, at, s.strategy);
  take(packed, at, s.mesh);
  if (at < packed.size()) take(packed, at, &s.islands, sizeof s.islands);
  if (at < packed.size()) {
    take(packed, at, &s.outer_in_flight, sizeof s.outer_in_flight);
    take(packed, at, &s.outer_apply_step, sizeof s.outer_apply_step);
  }
  return s;
}

}  // namespace hsdp::ckpt::meta
