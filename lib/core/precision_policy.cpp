#include "lib/core/precision_policy.h"

#include <cmath>

#include "lib/core/dtype.h"
#include "lib/core/error.h"
#include "lib/core/json_fields.h"
#include "lib/core/strings.h"

namespace magic {

PrecisionPolicy PrecisionPolicy::for_compute(c10::ScalarType compute) {
  PrecisionPolicy p;
  p.compute = compute;
  const bool low = compute == c10::kBFloat16 || compute == c10::kHalf;
  p.master = low ? c10::kFloat : compute;
  p.reduce = p.master;
  p.loss_scale = compute == c10::kHalf ? kDefaultFp16LossScale : 1.0;
  return p;
}

PrecisionPolicy PrecisionPolicy::from_json(const JsonFields& parent, const std::string& key,
                                           const std::string& fallback) {
  const nlohmann::json value = parent.raw(key, fallback);
  if (value.is_string()) {
    PrecisionPolicy p = for_compute(parse_dtype(value.get<std::string>(), parent.where(key)));
    p.validate(parent.where(key));
    return p;
  }
  if (!value.is_object()) {
    parent.fail(key, str_cat("expected a dtype name (\"bf16\") or an object {\"compute\", \"master\", ",
                             "\"reduce\", \"loss_scale\"}, got ", value.dump()));
  }
  const JsonFields f = parent.object(key);
  PrecisionPolicy p = for_compute(parse_dtype(f.string("compute"), f.where("compute")));
  if (f.has("master")) p.master = parse_dtype(f.string("master"), f.where("master"));
  p.reduce = f.has("reduce") ? parse_dtype(f.string("reduce"), f.where("reduce")) : p.master;
  p.loss_scale = f.number("loss_scale", p.loss_scale);
  f.finish();
  p.validate(f.where());
  return p;
}

void PrecisionPolicy::validate(const std::string& what) const {
  auto bits = [](c10::ScalarType t) { return -std::log2(unit_roundoff(t)); };
  if (master != c10::kFloat && master != c10::kDouble) {
    throw InputError(str_cat(what, ": master dtype ", dtype_name(master), " holds the parameters and optimizer state; ",
                             "expected fp32 or fp64"));
  }
  if (bits(master) < bits(compute)) {
    throw InputError(str_cat(what, ": master dtype ", dtype_name(master), " is less precise than the compute dtype ",
                             dtype_name(compute)));
  }
  if (reduce != compute && reduce != master) {
    throw InputError(str_cat(what, ": reduce dtype ", dtype_name(reduce), ": expected the compute dtype (",
                             dtype_name(compute), ") or the master dtype (", dtype_name(master), ")"));
  }
  int exponent = 0;
  if (!(loss_scale > 0.0) || !std::isfinite(loss_scale) || std::frexp(loss_scale, &exponent) != 0.5) {
    throw InputError(str_cat(what, ": loss_scale ", loss_scale,
                             ": expected a power of two (1, 2, ..., 1024, ...), so scaling and unscaling are exact"));
  }
}

std::string PrecisionPolicy::str() const {
  if (*this == for_compute(compute)) return dtype_name(compute);
  return str_cat(dtype_name(compute), " compute, ", dtype_name(master), " master, ", dtype_name(reduce),
                 " reduce, loss scale ", loss_scale);
}

nlohmann::json PrecisionPolicy::to_json() const {
  return {{"compute", dtype_name(compute)},
          {"master", dtype_name(master)},
          {"reduce", dtype_name(reduce)},
          {"loss_scale", loss_scale}};
}

bool operator==(const PrecisionPolicy& a, const PrecisionPolicy& b) {
  return a.compute == b.compute && a.master == b.master && a.reduce == b.reduce && a.loss_scale == b.loss_scale;
}

double unit_roundoff(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kDouble:
      return std::ldexp(1.0, -53);
    case c10::kFloat:
      return std::ldexp(1.0, -24);
    case c10::kBFloat16:
      return std::ldexp(1.0, -8);
    case c10::kHalf:
      return std::ldexp(1.0, -11);
    default:
      throw std::invalid_argument("unit_roundoff: not a floating dtype: " + dtype_name(dtype));
  }
}

}  // namespace magic
