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
