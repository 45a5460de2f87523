#include "hsdp/model/init.hpp"

#include <string>

#include "hsdp/core/error.hpp"
#include "hsdp/model/rng.hpp"

namespace hsdp::model {

template <typename T>
void init_param(const ParamInfo& p, std::span<T> values, std::uint64_t seed) {
  if (values.size() != p.numel) {
    throw_internal("init_param: " + p.name + " needs " + std::to_string(p.numel) + " elements, got " +
                   std::to_string(values.size()));
  }
  // Only the logical part is drawn; a padded tail (wte's extra rows) stays zero.
  const std::size_t logical = p.logical_numel();
  switch (p.init) {
    case ParamInit::zeros:
      for (T& v : values) v = T(0);
      break;
    case ParamInit::ones:
      for (T& v : values) v = T(1);
      break;
    case ParamInit::normal: {
      Rng rng(stream_seed(seed, p.name));
      for (std::size_t i = 0; i < values.size(); ++i) {
        values[i] = i < logical ? static_cast<T>(p.init_std * rng.normal()) : T(0);
      }
      break;
    }
  }
}

template <typename T>
void init_unit(const ModelLayout& layout, int unit, std::span<T> unit_buffer, std::uint64_t seed) {
  const UnitInfo& u = layout.unit(unit);
  if (unit_buffer.size() != u.numel) {
    throw_internal("init_unit: unit " + u.name + " needs " + std::to_string(u.numel) + " elements, got " +
                   std::to_string(unit_buffer.size()));
  }
  for (const ParamInfo* p : layout.unit_params(unit)) init_param(*p, unit_buffer.subspan(p->offset, p->numel), seed);
}

template void init_param<float>(const ParamInfo&, std::span<float>, std::uint64_t);
template void init_param<double>(const ParamInfo&, std::span<double>, std::uint64_t);
template void init_unit<float>(const ModelLayout&, int, std::span<float>, std::uint64_t);
template void init_unit<double>(const ModelLayout&, int, std::span<double>, std::uint64_t);

}  // namespace hsdp::model
