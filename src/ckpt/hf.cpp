#include "hsdp/ckpt/hf.hpp"

#include <boost/property_tree/json_parser.hpp>
#include <boost/property_tree/ptree.hpp>
#include <charconv>
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

// GPT-2's Conv1D layers (the 2-D weights inside a block) store [in, out]; hsdp's Linear stores [out, in]. A Llama's
// are nn.Linear, [out, in] as hsdp's.
bool is_conv1d(const model::GptConfig& c, const model::ParamInfo& p) {
  return !c.llama() && p.unit != model::ModelLayout::embedding_unit() && p.shape.size() == 2;
}

std::vector<std::int64_t> hf_shape(const model::GptConfig& c, const model::ParamInfo& p) {
  if (is_conv1d(c, p)) return {p.shape[1], p.shape[0]};
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
  // The key is there and not JSON null (an object counts).
  bool present(const char* key) const {
    const auto node = root_.get_child_optional(boost::property_tree::ptree::path_type(key, '\0'));
    return node && (!node->empty() || node->get_value<std::string>() != "null");
  }
  int integer(const char* key) const {
    const std::optional<std::string> value = text(key);
    if (!value) fail(path_, std::string("has no '") + key + "' (the model's shape)");
    try {
      std::size_t used = 0;
      const int n = std::stoi(*value, &used);
      if (used == value->size()) return n;
    } catch (const std::exception&) {
    }
    fail(path_, std::string("'") + key + "' is '" + *value + "', not an integer");
  }
  double real(const char* key, double fallback) const {
    const std::optional<std::string> value = text(key);
    if (!value) return fallback;
    try {
      std::size_t used = 0;
      const double x = std::stod(*value, &used);
      if (used == value->size()) return x;
    } catch (const std::exception&) {
    }
    fail(path_, std::string("'") + key + "' is '" + *value + "', not a number");
  }
  // Refuses a present key whose value is not `expected` (for config switches hsdp's model does not have).
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

// LlamaConfig's keys (transformers' defaults for absent ones: rms_norm_eps 1e-6, rope_theta 10000, untied).
model::GptConfig read_llama_config(const ConfigReader& in) {
  in.require("hidden_act", "silu", "SwiGLU's gate is SiLU");
  in.require("attention_bias", "false", "a Llama without biases");
  in.require("mlp_bias", "false", "a Llama without biases");
  in.require("pretraining_tp", "1", "no tensor-parallel slicing of the MLP");
  if (in.present("rope_scaling")) fail(in.path(), "'rope_scaling' is set; hsdp's RoPE has no scaling (null only)");
  model::GptConfig c;
  c.arch = model::Arch::llama;
  c.n_layer = in.integer("num_hidden_layers");
  c.n_head = in.integer("num_attention_heads");
  c.n_embd = in.integer("hidden_size");
  c.n_kv_head = in.text("num_key_value_heads") ? in.integer("num_key_value_heads") : c.n_head;
  c.ffn_dim = in.integer("intermediate_size");
  c.block_size = in.integer("max_position_embeddings");
  c.vocab_size = in.integer("vocab_size");
  c.norm_eps = in.real("rms_norm_eps", 1e-6);
  c.rope_theta = in.real("rope_theta", 10000.0);
  const std::optional<std::string> tied = in.text("tie_word_embeddings");
  c.tie_embeddings = tied && *tied == "true";
  if (in.text("head_dim") && c.n_head > 0 && in.integer("head_dim") * c.n_head != c.n_embd) {
    fail(in.path(), "'head_dim' is " + *in.text("head_dim") + "; hsdp's heads are hidden_size / num_attention_heads");
  }
  return c;
}

model::GptConfig read_config(const ConfigReader& in) {
  const std::optional<std::string> type = in.text("model_type");
  if (type && *type == "llama") return read_llama_config(in);
  if (!type || *type != "gpt2") {
    fail(in.path(),
         "model_type is '" + type.value_or("(none)") + "'; only GPT-2 (gpt2) and Llama (llama) are imported");
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

// transformers' names for a GPT2LMHeadModel carry "transformer."; a GPT2Model's (and the hub's gpt2) do not. A
// Llama's are LlamaForCausalLM's as they stand.
std::string canonical_name(const model::GptConfig& c, const std::string& name) {
  if (c.llama() || name.starts_with(kPrefix) || name == "lm_head.weight") return name;
  return kPrefix + name;
}

// Causal-mask buffers that older transformers saved with the weights.
bool is_mask_buffer(const std::string& name) {
  return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
}

std::string json_object(const std::vector<std::pair<const char*, std::string>>& keys) {
  std::string text = "{\n";
  for (std::size_t i = 0; i < keys.size(); ++i) {
    text += "  " + JsonLine::quote(keys[i].first) + ": " + keys[i].second + (i + 1 < keys.size() ? ",\n" : "\n");
  }
  return text + "}\n";
}

// The shortest text that reads back as x (1e-05, 10000, 500000).
std::string number(double x) {
  char text[32];
  const auto [end, error] = std::to_chars(text, text + sizeof text, x);
  return error == std::errc{} ? std::string(text, end) : std::to_string(x);
}

// LlamaConfig as transformers writes it, sorted by key. No BOS or EOS: hsdp's token files have none.
std::string llama_config_json(const model::GptConfig& c) {
  return json_object({{"architectures", "[" + JsonLine::quote("LlamaForCausalLM") + "]"},
                      {"attention_bias", "false"},
                      {"attention_dropout", "0.0"},
                      {"bos_token_id", "null"},
                      {"eos_token_id", "null"},
                      {"head_dim", std::to_string(c.head_size())},
                      {"hidden_act", JsonLine::quote("silu")},
                      {"hidden_size", std::to_string(c.n_embd)},
                      {"initializer_range", "0.02"},
                      {"intermediate_size", std::to_string(c.ffn())},
                      {"max_position_embeddings", std::to_string(c.block_size)},
                      {"mlp_bias", "false"},
                      {"model_type", JsonLine::quote("llama")},
                      {"num_attention_heads", std::to_string(c.n_head)},
                      {"num_hidden_layers", std::to_string(c.n_layer)},
                      {"num_key_value_heads", std::to_string(c.kv_heads())},
                      {"pretraining_tp", "1"},
                      {"rms_norm_eps", number(c.norm_eps)},
                      {"rope_scaling", "null"},
                      {"rope_theta", number(c.rope_theta)},
                      {"tie_word_embeddings", c.tie_embeddings ? "true" : "false"},
                      {"torch_dtype", JsonLine::quote("float32")},
                      {"use_cache", "true"},
                      {"vocab_size", std::to_string(c.vocab_size)}});
}

}  // namespace

std::string hf_config_json(const model::GptConfig& c) {
  if (c.llama()) return llama_config_json(c);
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
  return json_object(keys);
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
  return json_object(keys);
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
    if (is_conv1d(layout.config(), p)) {
      transposed.emplace_back(p.numel);
      transpose(data, p.shape[0], p.shape[1], transposed.back().data());
      data = transposed.back().data();  // a vector's storage stays put when the outer vector grows
    }
    tensors.push_back({p.name, hf_shape(layout.config(), p), data});
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
    fail(dir, "not a directory (a Hugging Face model directory holds config.json and model.safetensors)");
  }
  const std::string config_path = file_in(dir, kHfConfigFile);
  const std::string weights_path = file_in(dir, kHfWeightsFile);
  for (const std::string& path : {config_path, weights_path}) {
    if (!std::filesystem::exists(path))
      fail(path, "missing (a Hugging Face model directory holds config.json and model.safetensors)");
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
  const model::GptConfig& c = layout.config();
  for (const model::UnitInfo& u : layout.units()) m.unit_params.emplace_back(u.numel);

  std::set<std::string> seen;
  const bool head_param = layout.find_param("lm_head.weight") != nullptr;  // an untied Llama's
  for (const auto& [stored_name, entry] : weights.tensors()) {
    if (!c.llama() && is_mask_buffer(stored_name)) continue;
    const std::string name = canonical_name(c, stored_name);
    if (!seen.insert(name).second) fail(weights_path, "holds '" + name + "' twice (with and without 'transformer.')");
    if (name == "lm_head.weight" && !head_param) continue;  // tied: checked against the embedding below
    const model::ParamInfo* p = layout.find_param(name);
    if (p == nullptr) {
      fail(weights_path,
           "tensor '" + stored_name + "' is not a parameter of hsdp's " + (c.llama() ? "Llama" : "GPT-2"));
    }
    if (entry.shape != hf_shape(c, *p)) {
      fail(weights_path, "tensor '" + stored_name + "' has shape " + shape_text(entry.shape) +
                             "; config.json's model needs " + shape_text(hf_shape(c, *p)));
    }
    const std::vector<float> values = weights.floats(stored_name);
    float* dest = m.unit_params[static_cast<std::size_t>(p->unit)].data() + p->offset;
    if (is_conv1d(c, *p)) {
      transpose(values.data(), p->shape[1], p->shape[0], dest);
    } else {
      std::memcpy(dest, values.data(), values.size() * sizeof(float));
    }
  }
  for (const model::ParamInfo& p : layout.params()) {
    if (!seen.contains(p.name)) fail(weights_path, "has no tensor '" + p.name + "'");
  }
  if (seen.contains("lm_head.weight") && !head_param) {
    const model::ParamInfo& wte = layout.param(c.llama() ? "model.embed_tokens.weight" : "transformer.wte.weight");
    const std::vector<float> head = weights.floats("lm_head.weight");
    const float* embedding = m.unit_params[static_cast<std::size_t>(wte.unit)].data() + wte.offset;
    if (head.size() != wte.logical_numel() || std::memcmp(head.data(), embedding, head.size() * sizeof(float)) != 0) {
      fail(weights_path, "lm_head.weight differs from " + wte.name + "; config.json ties the LM head to the embedding");
    }
  }
  return m;
}

}  // namespace hsdp::ckpt
