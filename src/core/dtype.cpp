#include "hsdp/core/dtype.hpp"

#include "hsdp/core/error.hpp"

namespace hsdp {

std::string_view to_string(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i8: return "int8";
    case DType::u8: return "uint8";
  }
  return "?";
}

DType parse_dtype(std::string_view text, std::string_view what) {
  if (text == "f32" || text == "fp32") return DType::f32;
  if (text == "f64" || text == "fp64") return DType::f64;
  if (text == "bf16") return DType::bf16;
  if (text == "f16" || text == "fp16") return DType::f16;
  if (text == "int8" || text == "i8") return DType::i8;
  if (text == "uint8" || text == "u8") return DType::u8;
  throw_config(std::string(what) + ": unknown dtype '" + std::string(text) +
               "' (allowed: fp32, fp64, bf16, fp16, int8, uint8)");
}

}  // namespace hsdp

namespace hsdp {

void convert_from_f32(std::span<const float> values, void* out, DType to) {
  switch (to) {
    case DType::f32: std::memcpy(out, values.data(), values.size_bytes()); return;
    case DType::bf16: {
      auto* dst = static_cast<bf16_t*>(out);
      for (std::size_t i = 0; i < values.size(); ++i) dst[i] = float_to_bf16(values[i]);
      return;
    }
    case DType::f16: {
      auto* dst = static_cast<f16_t*>(out);
      for (std::size_t i = 0; i < values.size(); ++i) dst[i] = float_to_f16(values[i]);
      return;
    }
    default: throw_internal("convert_from_f32: unsupported target " + std::string(to_string(to)));
  }
}

void convert_to_f32(const void* in, DType from, std::span<float> values) {
  switch (from) {
    case DType::f32: std::memcpy(values.data(), in, values.size_bytes()); return;
    case DType::bf16: {
      const auto* src = static_cast<const bf16_t*>(in);
      for (std::size_t i = 0; i < values.size(); ++i) values[i] = bf16_to_float(src[i]);
      return;
    }
    case DType::f16: {
      const auto* src = static_cast<const f16_t*>(in);
      for (std::size_t i = 0; i < values.size(); ++i) values[i] = f16_to_float(src[i]);
      return;
    }
    default: throw_internal("convert_to_f32: unsupported source " + std::string(to_string(from)));
  }
}

void round_to(std::span<float> values, DType to) {
  if (to == DType::bf16) {
    for (float& x : values) x = bf16_to_float(float_to_bf16(x));
  } else if (to == DType::f16) {
    for (float& x : values) x = f16_to_float(float_to_f16(x));
  }
}

}  // namespace hsdp
