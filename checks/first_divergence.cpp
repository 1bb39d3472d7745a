#include "checks/first_divergence.h"

#include <filesystem>

#include "checks/lm_pipelines.h"
#include "checks/mutations.h"
#include "lib/core/dtype.h"
#include "lib/core/strings.h"
#include "lib/distributed/parallel/mesh_dump.h"
#include "lib/distributed/runtime/progress.h"
#include "lib/trace/dump_comparison.h"
#include "lib/trace/dump_reader.h"
#include "lib/train/memory_estimate.h"

namespace magic::checks {

int64_t trace_record_bytes(const CheckSettings& s) {
  const RunConfig c = lm_unclipped_config(s);
  // The check's data weights are per token, at most.
  return estimate_dump_bytes(c, lm_training_examples(s) * c.model.max_len, 1);
}

std::string first_divergence_unavailable(const CheckSettings& s) {
  if (s.precision.compute != at::kDouble && s.precision.compute != at::kFloat) {
    return str_cat("below fp32 (", s.precision.str(), ") one record cannot tell a bug from rounding");
  }
  if (s.resolved_workload() != "lm") return "";
  if (const int64_t bytes = trace_record_bytes(s); bytes > kMaxTraceBytes) {
    return str_cat("its records would take ", format_bytes(static_cast<double>(bytes)), ", more than ",
                   format_bytes(static_cast<double>(kMaxTraceBytes)));
  }
  return "";
}

std::vector<std::vector<int64_t>> micro_batch_positions(int64_t rows, int64_t dp, int64_t mb) {
  // Written out from the layout's definition (docs/magic-check.md, "Micro-batches") rather than
  // taken from the engine's split, so that a slip there shows as rows that differ.
  auto parts = [](int64_t begin, int64_t size, int64_t n) {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (int64_t k = 0; k < n; ++k) {
      const int64_t part = size / n + (k < size % n ? 1 : 0);
      out.emplace_back(begin, begin + part);
      begin += part;
    }
    return out;
  };
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(mb));
  for (const auto& [begin, end] : parts(0, rows, dp)) {
    int64_t k = 0;
    for (const auto& [first, last] : parts(begin, end - begin, mb)) {
      for (int64_t i = first; i < last; ++i) out[static_cast<size_t>(k)].push_back(i);
      ++k;
    }
  }
  return out;
}

void record_hvp(const TensorTree& hvp, int64_t step, const TraceLayout& layout) {
  trace_parameter_tree(hvp, {"", "gradient", "backward", "hvp", step, "", {}}, layout);
}

void write_rank_trace(const std::string& folder, const DumpSink& sink, const dist::Group& world,
                      const TraceLayout& layout) {
  const std::string failure = dist::write_mesh_dump(folder, "magic-check", sink.entries(), world, layout);
  if (!failure.empty()) dist::note_in_rank_log("first divergence: " + failure);
}

namespace {

std::string first_divergence_of(const LoadedDump& candidate, const std::vector<DumpSink::Entry>& reference,
                                const CheckSettings& s) {
  CompareOptions options;
  options.factor_sizes = factor_sizes(s.topology, s.precision);
  options.common_only = true;
  const DumpComparison c = compare_dumps(candidate, dump_in_memory(reference, "the reference"), options);
  if (c.rows.empty()) return "first divergence: not found (the runs made no common records)";
  if (!c.first_divergence) {
    return str_cat("first divergence: none among the ", c.rows.size(), " records both runs made (they agree to ",
                   format_sci(c.earlier_agreement, 0), "): the difference is in what they do not record");
  }
  return c.first_divergence_line();
}

}  // namespace

std::string first_divergence(const std::vector<DumpSink::Entry>& candidate,
                             const std::vector<DumpSink::Entry>& reference, const CheckSettings& s) {
  try {
    return first_divergence_of(dump_in_memory(candidate, "the distributed run"), reference, s);
  } catch (const std::exception& e) {
    return str_cat("first divergence: not found (", e.what(), ")");
  }
}

std::string first_divergence(const std::string& folder, const std::vector<DumpSink::Entry>& reference,
                             const CheckSettings& s) {
  try {
    if (!std::filesystem::exists(std::filesystem::path(folder) / "manifest.json")) {
      return "first divergence: not found (a rank could not write its records; see the rank logs)";
    }
    return first_divergence_of(read_dump(folder), reference, s);
  } catch (const std::exception& e) {
    return str_cat("first divergence: not found (", e.what(), ")");
  }
}

}  // namespace magic::checks
