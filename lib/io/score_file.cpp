#include "lib/io/score_file.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/io/atomic_file.h"
#include "lib/io/safetensors.h"

namespace magic {
namespace {

std::string tsv_field(std::string text) {
  for (char& c : text) {
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  }
  return text;
}

}  // namespace

at::Tensor example_totals(const ScoreTable& table) {
  if (table.per_query) return table.scores.dim() == 3 ? table.scores.sum(2) : table.scores;
  return table.scores.dim() == 2 ? table.scores.sum(1) : table.scores;
}

void write_score_files(const std::string& directory, const ScoreTable& table) {
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  if (ec) throw InputError(str_cat(directory, ": cannot create output directory (", ec.message(), ")"));
  TensorTree tensors;
  tensors.insert("scores", table.scores.detach().contiguous());
  std::map<std::string, std::string> metadata{{"example_ids", nlohmann::json(table.example_ids).dump()}};
  if (table.per_query) metadata["query_ids"] = nlohmann::json(table.query_ids).dump();
  save_safetensors((std::filesystem::path(directory) / "scores.safetensors").string(), tensors, metadata);

  const at::Tensor totals = example_totals(table).to(at::kDouble).contiguous();
  std::ostringstream out;
  out << "id";
  if (table.per_query) {
    for (const auto& q : table.query_ids) out << "\tscore[" << tsv_field(q) << "]";
  } else {
    out << "\tscore";
  }
  out << "\ttext\n";
  for (size_t i = 0; i < table.example_ids.size(); ++i) {
    out << tsv_field(table.example_ids[i]);
    if (table.per_query) {
      for (int64_t q = 0; q < totals.size(0); ++q) out << '\t' << format_number(totals[q][i].item<double>());
    } else {
      out << '\t' << format_number(totals[i].item<double>());
    }
    out << '\t' << tsv_field(i < table.example_texts.size() ? table.example_texts[i] : "") << '\n';
  }
  write_file_atomically((std::filesystem::path(directory) / "scores.tsv").string(), out.str());
}

}  // namespace magic
