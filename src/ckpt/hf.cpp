#include "hsdp/ckpt/hf.hpp"

#include <boost/property_tree/json_parser.hpp>
#include <boost/property_tree/ptree.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "hsdp/core/error.hpp"
#include "hsdp/core/json.hpp"
#include "hsdp/model/layers.hpp"
#include "model_file.hpp"
#include "safetensors.hpp"

namespace hsdp::ckpt {
namespace {

using model_file::fail;

constexpr const char* kPrefix = "transformer.";
constexpr const char* kPaddedVocabKey = "hsdp_padded_vocab_size";
// GPT-2's tokenizer: <|endoftext|> is the last of its 50257 ids. Another vocabulary has no known end token.
constexpr int kGpt2Vocab = 50257;
constexpr int kGpt2EndOfText = 50256;

// GPT-2's Conv1D layers (the 2-D weights inside a block) store [in, out]; hsdp's Linear stores [out, in].
bool is_conv1d(const model::ParamInfo& p) {
  return p.unit != model::ModelLayout::embedding_unit() && p.shape.size() == 2;
}

std::vector<std::int64_t> hf_shape(const model::ParamInfo& p) {
  if (is_conv1d(p)) return {p.shape[1], p.shape[0]};
  return p.logical_shape;
}

// dst [cols, rows] = transpose of src [rows, cols]
void transpose(const float* src, std::int64_t rows, std::int64_t cols, float* dst) {
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
  }
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

std::string file_in(const std::string& dir, const char* name) {
  return (std::filesystem::path(dir) / name).string();
}

// config.json's keys, read by name (GPT2Config's defaults apply to absent keys).
class ConfigReader {
 public:
  explicit ConfigReader(std::string path) : path_(std::move(path)) {
    std::ifstream file(path_, std::ios::binary);
    if (!file) fail(path_, std::string("cannot open: ") + std::strerror(errno));
    std::stringstream text;
    text << file.rdbuf();
    model_file::check_json_nesting(text.str(), path_);
    try {
      boost::property_tree::read_json(text, root_);
    } catch (const boost::property_tree::json_parser_error& e) {
      fail(path_, "not valid JSON: " + e.message());
    }
  }
  const std::string& path() const { return path_; }

  // The key's value as text; nullopt when absent or JSON null.
  std::optional<std::string> text(const char* key) const {
    const auto node = root_.get_child_optional(boost::property_tree::ptree::path_type(key, '\0'));
    if (!node || !node->empty()) return std::nullopt;
    std::string value = node->get_value<std::string>();
    if (value == "null") return std::nullopt;
    return value;
  }
  int integer(const char* key) const {
    const std::optional<std::string> value = text(key);
    if (!value) fail(path_, std::string("has no '") + key + "' (GPT2Config's model shape)");
    try {
      std::size_t used = 0;
      const int n = std::stoi(*value, &used);
      if (used == value->size()) return n;
    } catch (const std::exception&) {
    }
    fail(path_, std::string("'") + key + "' is '" + *value + "', not an integer");
  }
  // Refuses a present key whose value is not `expected` (for GPT2Config switches hsdp's model does not have).
  void require(const char* key, const std::string& expected, const std::string& why) const {
    const std::optional<std::string> value = text(key);
    if (value && *value != expected) {
      fail(path_, std::string("'") + key + "' is " + *value + "; hsdp runs only " + expected + " (" + why + ")");
    }
  }

 private:
  std::string path_;
  boost::property_tree::ptree root_;
};

model::GptConfig read_config(const ConfigReader& in) {
  const std::optional<std::string> type = in.text("model_type");
  if (!type || *type != "gpt2") {
    fail(in.path(), "model_type is '" + type.value_or("(none)") + "'; only GPT-2 (model_type gpt2) is imported");
  }
  const std::optional<std::string> activation = in.text("activation_function");
  if (activation && *activation != "gelu_new" && *activation != "gelu_pytorch_tanh") {
    fail(in.path(), "'activation_function' is " + *activation +
                        "; hsdp's GELU is the tanh approximation (gelu_new or gelu_pytorch_tanh)");
  }
  if (const std::optional<std::string> eps = in.text("layer_norm_epsilon")) {
    double value = 0;
    try {
      value = std::stod(*eps);
    } catch (const std::exception&) {
      fail(in.path(), "'layer_norm_epsilon' is '" + *eps + "', not a number");
    }
    if (std::abs(value - model::kLayerNormEps) > 1e-6 * model::kLayerNormEps) {
      fail(in.path(), "'layer_norm_epsilon' is " + *eps + "; hsdp's LayerNorm uses 1e-05");
    }
  }
  in.require("tie_word_embeddings", "true", "the LM head is tied to wte");
  in.require("scale_attn_weights", "true", "attention scores are scaled by 1/sqrt(head size)");
  in.require("scale_attn_by_inverse_layer_idx", "false", "no per-layer attention scaling");
  in.require("add_cross_attention", "false", "a decoder without cross-attention");
  model::GptConfig c;
  c.n_layer = in.integer("n_layer");
  c.n_head = in.integer("n_head");
  c.n_embd = in.integer("n_embd");
  c.block_size = in.integer("n_positions");
  c.vocab_size = in.integer("vocab_size");
  if (const std::optional<std::string> inner = in.text("n_inner"); inner && *inner != std::to_string(4 * c.n_embd)) {
    fail(in.path(),
         "'n_inner' is " + *inner + "; hsdp's MLP is 4 * n_embd = " + std::to_string(4 * c.n_embd) + " wide");
  }
  return c;
}

// transformers' names for a GPT2LMHeadModel carry "transformer."; a GPT2Model's (and the hub's gpt2) do not.
std::string canonical_name(const std::string& name) {
  if (name.starts_with(kPrefix) || name == "lm_head.weight") return name;
  return kPrefix + name;
}

// Causal-mask buffers that older transformers saved with the weights.
bool is_mask_buffer(const std::string& name) {
  return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
}

}  // namespace

std::string hf_config_json(const model::GptConfig& c) {
  const bool gpt2_vocab = c.vocab_size == kGpt2Vocab;
  const std::string end_token = gpt2_vocab ? std::to_string(kGpt2EndOfText) : "null";
  // Sorted by key, as transformers' save_pretrained writes them.
  const std::vector<std::pair<const char*, std::string>> keys = {
      {"activation_function", JsonLine::quote("gelu_new")},
      {"architectures", "[" + JsonLine::quote("GPT2LMHeadModel") + "]"},
      {"attn_pdrop", "0.0"},
      {"bos_token_id", end_token},
      {"embd_pdrop", "0.0"},
      {"eos_token_id", end_token},
      {"initializer_range", "0.02"},
      {"layer_norm_epsilon", "1e-05"},
      {"model_type", JsonLine::quote("gpt2")},
      {"n_ctx", std::to_string(c.block_size)},
      {"n_embd", std::to_string(c.n_embd)},
      {"n_head", std::to_string(c.n_head)},
      {"n_inner", "null"},
      {"n_layer", std::to_string(c.n_layer)},
      {"n_positions", std::to_string(c.block_size)},
      {"reorder_and_upcast_attn", "false"},
      {"resid_pdrop", "0.0"},
      {"scale_attn_by_inverse_layer_idx", "false"},
      {"scale_attn_weights", "true"},
      {"tie_word_embeddings", "true"},
      {"torch_dtype", JsonLine::quote("float32")},
      {"use_cache", "true"},
      {"vocab_size", std::to_string(c.vocab_size)}};
  std::string text = "{\n";
  for (std::size_t i = 0; i < keys.size(); ++i) {
    text += "  " + JsonLine::quote(keys[i].first) + ": " + keys[i].second + (i + 1 < keys.size() ? ",\n" : "\n");
  }
  return text + "}\n";
}

std::string hf_tokenizer_config_json(int model_max_length) {
  // Sorted by key, as transformers writes them.
  const std::vector<std::pair<const char*, std::string>> keys = {
      {"add_bos_token", "false"},
      {"add_eos_token", "false"},
      {"bos_token", JsonLine::quote("<s>")},
      {"clean_up_tokenization_spaces", "false"},
      {"eos_token", JsonLine::quote("</s>")},
      {"legacy", "false"},
      {"model_max_length", std::to_string(model_max_length)},
      {"sp_model_kwargs", "{}"},
      {"tokenizer_class", JsonLine::quote("LlamaTokenizer")},
      {"unk_token", JsonLine::quote("<unk>")}};
  std::string text = "{\n";
  for (std::size_t i = 0; i < keys.size(); ++i) {
    text += "  " + JsonLine::quote(keys[i].first) + ": " + keys[i].second + (i + 1 < keys.size() ? ",\n" : "\n");
  }
  return text + "}\n";
}

void write_hf_tokenizer(const std::string& dir, const std::string& model_bytes, int model_max_length) {
  model_file::write_atomically(file_in(dir, kHfTokenizerFile), [&](std::FILE* f, const std::string& tmp) {
    model_file::write_bytes(f, model_bytes.data(), model_bytes.size(), tmp);
  });
  const std::string config = hf_tokenizer_config_json(model_max_length);
  model_file::write_atomically(file_in(dir, kHfTokenizerConfigFile), [&](std::FILE* f, const std::string& tmp) {
    model_file::write_bytes(f, config.data(), config.size(), tmp);
  });
}

void write_hf(const std::string& dir, const model::ModelLayout& layout, const std::vector<Buffer<float>>& unit_params) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail(dir, "cannot create the directory: " + ec.message());
  std::vector<std::vector<float>> transposed;  // the Conv1D weights, [in, out]
  std::vector<safetensors::TensorView> tensors;
  for (const model::ParamInfo& p : layout.params()) {
    const float* data = unit_params[static_cast<std::size_t>(p.unit)].data() + p.offset;
    if (is_conv1d(p)) {
      transposed.emplace_back(p.numel);
      transpose(data, p.shape[0], p.shape[1], transposed.back().data());
      data = transposed.back().data();  // a vector's storage stays put when the outer vector grows
    }
    tensors.push_back({p.name, hf_shape(p), data});
  }
  safetensors::write_file(file_in(dir, kHfWeightsFile), tensors,
                          {{"format", "pt"}, {kPaddedVocabKey, std::to_string(layout.config().padded_vocab_size)}});
  const std::string config = hf_config_json(layout.config());
  model_file::write_atomically(file_in(dir, kHfConfigFile), [&](std::FILE* f, const std::string& tmp) {
    model_file::write_bytes(f, config.data(), config.size(), tmp);
  });
}

HfModel read_hf(const std::string& dir, int padded_vocab_size) {
  if (!std::filesystem::is_directory(dir)) {
    fail(dir, "not a directory (a Hugging Face GPT-2 directory holds config.json and model.safetensors)");
  }
  const std::string config_path = file_in(dir, kHfConfigFile);
  const std::string weights_path = file_in(dir, kHfWeightsFile);
  for (const std::string& path : {config_path, weights_path}) {
    if (!std::filesystem::exists(path))
      fail(path, "missing (a Hugging Face GPT-2 directory holds config.json and model.safetensors)");
  }
  HfModel m;
  m.config = read_config(ConfigReader(config_path));
  const safetensors::File weights(weights_path);
  if (padded_vocab_size <= 0) {
    const auto stored = weights.metadata().find(kPaddedVocabKey);
    padded_vocab_size = stored != weights.metadata().end() ? std::atoi(stored->second.c_str())
                                                           : (m.config.vocab_size + 127) / 128 * 128;
  }
  m.config.padded_vocab_size = padded_vocab_size;
  try {
    m.config.validate();
  } catch (const Error& e) {
    fail(config_path, std::string("describes a model hsdp cannot build: ") + e.what());
  }
  const model::ModelLayout layout(m.config);
  for (const model::UnitInfo& u : layout.units()) m.unit_params.emplace_back(u.numel);

  std::set<std::string> seen;
  for (const auto& [stored_name, entry] : weights.tensors()) {
    if (is_mask_buffer(stored_name)) continue;
    const std::string name = canonical_name(stored_name);
    if (!seen.insert(name).second) fail(weights_path, "holds '" + name + "' twice (with and without 'transformer.')");
    if (name == "lm_head.weight") continue;  // checked against wte below
    const model::ParamInfo* p = layout.find_param(name);
    if (p == nullptr) fail(weights_path, "tensor '" + stored_name + "' is not a parameter of hsdp's GPT-2");
    if (entry.shape != hf_shape(*p)) {
      fail(weights_path, "tensor '" + stored_name + "' has shape " + shape_text(entry.shape) +
                             "; config.json's model needs " + shape_text(hf_shape(*p)));
    }
    const std::vector<float> values = weights.floats(stored_name);
    float* dest = m.unit_params[static_cast<std::size_t>(p->unit)].data() + p->offset;
    if (is_conv1d(*p)) {
      transpose(values.data(), p->shape[1], p->shape[0], dest);
    } else {
      std::memcpy(dest, values.data(), values.size() * sizeof(float));
    }
  }
  for (const model::ParamInfo& p : layout.params()) {
    if (!seen.contains(p.name)) fail(weights_path, "has no tensor '" + p.name + "'");
  }
  if (seen.contains("lm_head.weight")) {
    const model::ParamInfo& wte = layout.param("transformer.wte.weight");
    const std::vector<float> head = weights.floats("lm_head.weight");
    const float* embedding = m.unit_params[static_cast<std::size_t>(wte.unit)].data() + wte.offset;
    if (head.size() != wte.logical_numel() || std::memcmp(head.data(), embedding, head.size() * sizeof(float)) != 0) {
      fail(weights_path, "lm_head.weight differs from transformer.wte.weight; hsdp ties the LM head to the embedding");
    }
  }
  return m;
}

}  // namespace hsdp::ckpt
