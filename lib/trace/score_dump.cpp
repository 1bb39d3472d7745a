#include "lib/trace/score_dump.h"

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "lib/core/error.h"
#include "lib/core/non_finite.h"
#include "lib/core/strings.h"
#include "lib/io/safetensors.h"
#include "lib/io/score_file.h"

namespace magic {
namespace {

std::vector<std::string> id_list(const SafetensorsFile& file, const std::string& field, const std::string& path) {
  const auto it = file.metadata.find(field);
  if (it == file.metadata.end()) return {};
  try {
    const auto ids = nlohmann::json::parse(it->second);
    if (ids.is_array()) {
      std::vector<std::string> out;
      for (const auto& id : ids) {
        if (!id.is_string()) throw InputError("");
        out.push_back(id.get<std::string>());
      }
      return out;
    }
  } catch (const std::exception&) {
  }
  throw InputError(str_cat(path, ": metadata ", field, ": expected a JSON array of strings"));
}

}  // namespace

ScoreDump read_score_dump(const std::string& path) {
  const std::filesystem::path file(score_file_in(path));
  const SafetensorsFile scores = load_safetensors(file.string());
  if (!scores.tensors.contains("scores")) {
    throw InputError(str_cat(file.string(), ": no tensor 'scores' (not a magic-run score file)"));
  }
  const at::Tensor values = scores.tensors.at("scores");
  if (!at::isFloatingType(values.scalar_type()) || values.dim() < 1 || values.dim() > 2) {
    throw InputError(str_cat(file.string(), ": scores: expected a floating tensor [N], [N, T] or [Q, N], got ",
                             values.scalar_type(), " ", values.sizes()));
  }
  if (const auto bad = describe_non_finite(values)) throw InputError(str_cat(file.string(), ": scores hold ", *bad));
  ScoreDump out;
  out.example_ids = id_list(scores, "example_ids", file.string());
  out.query_ids = id_list(scores, "query_ids", file.string());
  const bool per_query = !out.query_ids.empty();
  const int64_t examples = per_query ? values.size(values.dim() - 1) : values.size(0);
  if (static_cast<int64_t>(out.example_ids.size()) != examples) {
    throw InputError(
        str_cat(file.string(), ": metadata example_ids: ", out.example_ids.size(), " ids for ", examples, " examples"));
  }
  if (per_query && (values.dim() != 2 || static_cast<int64_t>(out.query_ids.size()) != values.size(0))) {
    throw InputError(str_cat(file.string(), ": metadata query_ids: ", out.query_ids.size(), " ids for scores of shape ",
                             values.sizes()));
  }
  LoadedDump& dump = out.dump;
  dump.path = file.string();
  dump.manifest.run = "scores";
  dump.manifest.ranks.push_back({0, {}, file.filename().string(), {}});
  DumpTensor t;
  t.record.key = "scores";
  t.record.record = {"scores", "score", "replay", "metagradient", -1, "", {}};
  t.record.dtype = values.scalar_type();
  t.record.shape = values.sizes().vec();
  t.whole = values;
  t.pieces = {values};
  dump.tensors.push_back(t);
  return out;
}

LoadedDump aligned_scores(const ScoreDump& candidate_scores, const ScoreDump& reference_scores) {
  const LoadedDump& candidate = candidate_scores.dump;
  const LoadedDump& reference = reference_scores.dump;
  const std::vector<std::string>& a = candidate_scores.example_ids;
  const std::vector<std::string>& b = reference_scores.example_ids;
  if (candidate_scores.query_ids != reference_scores.query_ids) {
    throw InputError(
        str_cat(candidate.path, " and ", reference.path, ": the query ids differ (scores for other queries)"));
  }
  std::map<std::string, int64_t> position;
  for (size_t i = 0; i < a.size(); ++i) position[a[i]] = static_cast<int64_t>(i);
  if (position.size() != a.size() || a.size() != b.size()) {
    throw InputError(str_cat(candidate.path, " and ", reference.path, ": the example ids differ (", a.size(), " and ",
                             b.size(), " examples, or repeated ids)"));
  }
  std::vector<int64_t> order;
  for (const auto& id : b) {
    const auto it = position.find(id);
    if (it == position.end()) {
      throw InputError(str_cat(candidate.path, ": has no example '", id, "' (", reference.path, " has)"));
    }
    order.push_back(it->second);
  }
  LoadedDump aligned = candidate;
  DumpTensor& t = aligned.tensors.front();
  const int64_t dim = candidate_scores.query_ids.empty() ? 0 : 1;
  t.whole = t.whole.index_select(dim, at::tensor(order, at::kLong));
  t.pieces = {t.whole};
  return aligned;
}

}  // namespace magic
