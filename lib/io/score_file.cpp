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

// The length of the valid UTF-8 sequence starting at s[i], or 0 if the bytes there are not one
// (overlong forms, surrogates and code points above U+10FFFF included).
size_t utf8_sequence(const std::string& s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return n;
}

// A TSV field: backslash, tab, newline and carriage return escaped as \\, \t, \n, \r (what the
// JSON metadata's strings decode to is what unescaping the TSV field gives), so both files join
// on id; text passes through printable_text first.
std::string tsv_field(const std::string& text) {
  std::string out;
  for (char c : printable_text(text)) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

std::string printable_text(const std::string& text) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_sequence(text, i);
    if (n > 0) {
      out.append(text, i, n);
      i += n;
      continue;
    }
    const auto b = static_cast<unsigned char>(text[i++]);
    out += "\\x";
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

std::vector<std::string> printable_texts(const std::vector<std::string>& texts) {
  std::vector<std::string> out;
  for (const auto& t : texts) out.push_back(printable_text(t));
  return out;
}

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
