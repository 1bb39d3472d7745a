#include "lib/distributed/runtime/raise_hook.h"

#include <ATen/ATen.h>

#include <cstdlib>
#include <optional>

#include "lib/core/error.h"

namespace magic::dist {
namespace {

struct RaisePoint {
  std::string phase;
  std::optional<int> rank;  // every rank when unset
};

std::optional<RaisePoint> parse_raise_point() {
  const char* value = std::getenv("MAGIC_RAISE_AT");
  if (value == nullptr || *value == '\0') return std::nullopt;
  const std::string text = value;
  RaisePoint p{text, std::nullopt};
  // Phases may hold a colon ("REPLAY: recomputing ..."): the rank is the last field.
  if (const size_t at = text.rfind(":rank="); at != std::string::npos) {
    const std::string rank = text.substr(at + 6);
    if (rank.empty() || rank.size() > 6 || rank.find_first_not_of("0123456789") != std::string::npos) {
      throw InputError("MAGIC_RAISE_AT=" + text + ": expected PHASE or PHASE:rank=R");
    }
    p.phase = text.substr(0, at);
    p.rank = std::stoi(rank);
  }
  return p;
}

}  // namespace

void raise_if_asked(const std::string& phase, int rank) {
  static const std::optional<RaisePoint> point = parse_raise_point();
  if (!point || point->phase != phase || (point->rank && *point->rank != rank)) return;
  // A real out-of-range index, so that the exception and its message are what LibTorch raises.
  const at::Tensor table = at::zeros({4}, at::kDouble);
  at::index_select(table, 0, at::full({1}, 4, at::kLong));
}

}  // namespace magic::dist
