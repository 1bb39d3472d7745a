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

// A TSV field: backslash, tab, newline and carriage return escaped as \\, \t, \n, \r (what the
// JSON metadata's strings decode to is what unescaping the TSV field gives), so both files join
// on id; text passes through printable_text first.
std::string tsv_field(const std::string& text) {
  return one_line_text(text, /*escape_backslash=*/true);
}

std::vector<std::string> printable_texts(const std::vector<std::string>& texts) {
  std::vector<std::string> out;
  for (const auto& t : texts) out.push_back(printable_text(t));
  return out;
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
  std::map<std::string, std::string> metadata{
      {"example_ids", nlohmann::json(printable_texts(table.example_ids)).dump()}};
  if (table.per_query) metadata["query_ids"] = nlohmann::json(printable_texts(table.query_ids)).dump();
  save_safetensors((std::filesystem::path(directory) / "scores.safetensors").string(), tensors, metadata);

  const at::Tensor totals = example_totals(table).to(at::kDouble).contiguous();
  std::ostringstream out;
  out << "id";
  if (table.per_query) {
    for (const auto& q : table.query_ids) out << "\tscore[" << tsv_field(q) << "]";
  } else {
    out << "\tscore";
  }
  const bool prompts = !table.example_prompts.empty();
  out << (prompts ? "\tprompt\ttext\n" : "\ttext\n");
  for (size_t i = 0; i < table.example_ids.size(); ++i) {
    out << tsv_field(table.example_ids[i]);
    if (table.per_query) {
      for (int64_t q = 0; q < totals.size(0); ++q) out << '\t' << format_number(totals[q][i].item<double>());
    } else {
      out << '\t' << format_number(totals[i].item<double>());
    }
    if (prompts) out << '\t' << tsv_field(i < table.example_prompts.size() ? table.example_prompts[i] : "");
    out << '\t' << tsv_field(i < table.example_texts.size() ? table.example_texts[i] : "") << '\n';
  }
  write_file_atomically((std::filesystem::path(directory) / "scores.tsv").string(), out.str());
}

std::string score_file_in(const std::string& path) {
  namespace fs = std::filesystem;
  const char* expected = "(expected a scores.safetensors file or magic-run's --out folder)";
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) throw InputError(str_cat(path, ": no such file or folder ", expected));
  if (!fs::is_directory(status)) return path;
  const fs::path inside = fs::path(path) / "scores.safetensors";
  if (!fs::is_regular_file(inside, ec)) {
    throw InputError(str_cat(path, ": a folder without scores.safetensors ", expected));
  }
  return inside.string();
}

}  // namespace magic
