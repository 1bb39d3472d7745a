#include "lib/trace/trace_record.h"

#include <algorithm>

#include "lib/core/strings.h"

namespace magic {

namespace {

std::string type_text(const Placement& p) {
  switch (p.type) {
    case Placement::Type::kReplicate:
      return "replicate";
    case Placement::Type::kShard:
      if (p.parts > 1) return str_cat("shard(", p.dim, ", ", p.parts, " parts)");
      return p.length > 0 ? str_cat("shard(", p.dim, ", length ", p.length, ")") : str_cat("shard(", p.dim, ")");
    case Placement::Type::kZigzag:
      return p.length > 0 ? str_cat("zigzag(", p.dim, ", length ", p.length, ")") : str_cat("zigzag(", p.dim, ")");
    case Placement::Type::kPartial:
      return p.reduce == Placement::Reduce::kSum ? "partial(sum)" : "partial(avg)";
  }
  return "?";
}

}  // namespace

std::string placement_text(const Placement& p) {
  if (p.on.empty()) return type_text(p);
  std::vector<std::string> on;
  for (const int64_t c : p.on) on.push_back(std::to_string(c));
  return type_text(p) + " on " + join(on, ", ");
}

bool holds_piece(const std::vector<Placement>& placements, const std::vector<int64_t>& coords) {
  for (size_t m = 0; m < placements.size() && m < coords.size(); ++m) {
    const auto& on = placements[m].on;
    if (!on.empty() && std::find(on.begin(), on.end(), coords[m]) == on.end()) return false;
  }
  return true;
}

const std::vector<std::string>& trace_kinds() {
  static const std::vector<std::string> kinds = {
      "input",  "activation", "logits",    "loss",  "gradient", "reduced_gradient",
      "update", "parameter",  "cotangent", "score", "other",    "attention"};
  return kinds;
}

const std::vector<std::string>& trace_phases() {
  static const std::vector<std::string> phases = {"forward", "backward", "reduction", "optimizer",
                                                  "replay",  "query",    "other"};
  return phases;
}

const std::vector<std::string>& trace_orders() {
  static const std::vector<std::string> orders = {"forward", "first", "hvp", "metagradient"};
  return orders;
}

std::string record_identity(const TraceRecord& r) {
  return str_cat(r.step, "|", r.micro_batch, "|", r.phase, "|", r.order, "|", r.kind, "|", r.name);
}

std::string record_place(const TraceRecord& r) {
  // "loss", not "loss loss": a record named after its kind says it once.
  std::string what = r.name == r.kind || r.kind == "other" ? r.name : r.name + " " + r.kind;
  if (r.order == "hvp" || r.order == "metagradient") what += " (" + r.order + ")";
  const std::string micro = r.micro_batch >= 0 ? str_cat("micro-batch ", r.micro_batch, ", ") : "";
  return r.step >= 0 ? str_cat("step ", r.step, ", ", micro, r.phase, ", ", what) : str_cat(micro, r.phase, ", ", what);
}

}  // namespace magic
