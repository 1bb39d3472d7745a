#include "lib/text/tokenizer_folder.h"

#include <filesystem>
#include <fstream>
#include <map>

#include "lib/core/error.h"
#include "lib/core/input_file.h"
#include "lib/core/input_limits.h"
#include "lib/core/json_fields.h"
#include "lib/core/strings.h"
#include "lib/core/utf8.h"

namespace magic {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string type_of(const json& section) {
  if (section.is_null()) return "";
  if (!section.is_object() || !section.contains("type") || !section["type"].is_string()) return "?";
  return section["type"].get<std::string>();
}

[[noreturn]] void refuse(const std::string& file, const std::string& key, const std::string& why) {
  throw InputError(str_cat(file, ": ", key, ": ", why));
}

bool flag(const json& object, const char* key, bool fallback, const std::string& file, const std::string& path) {
  if (!object.contains(key) || object[key].is_null()) return fallback;
  if (!object[key].is_boolean()) refuse(file, path + "." + key, "expected true or false");
  return object[key].get<bool>();
}

std::unordered_map<std::string, int64_t> read_vocab(const json& vocab, const std::string& file,
                                                    const std::string& key) {
  if (!vocab.is_object()) refuse(file, key, "expected an object of token -> id");
  std::unordered_map<std::string, int64_t> out;
  out.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer()) refuse(file, key + "['" + quoted_input(token) + "']", "expected an integer id");
    out.emplace(token, id.get<int64_t>());
  }
  return out;
}

std::pair<std::string, std::string> split_merge(const std::string& line, const std::string& where) {
  const size_t space = line.find(' ');
  if (space == std::string::npos || space == 0 || space + 1 == line.size() ||
      line.find(' ', space + 1) != std::string::npos) {
    throw InputError(str_cat(where, ": expected two tokens separated by one space, got '", quoted_input(line), "'"));
  }
  return {line.substr(0, space), line.substr(space + 1)};
}

// The normalizer: none or NFC (alone or as the one step of a Sequence).
bool read_normalizer(const json& n, const std::string& file) {
  const std::string type = type_of(n);
  if (type.empty()) return false;
  if (type == "NFC") return true;
  if (type == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array()) {
    const json& steps = n["normalizers"];
    if (steps.empty()) return false;
    if (steps.size() == 1 && type_of(steps[0]) == "NFC") return true;
  }
  refuse(file, "normalizer",
         str_cat("'", quoted_input(n.dump(-1, ' ', false, json::error_handler_t::replace)),
                 "' is not supported (expected null or NFC)"));
}

// The pre-tokenizer must be ByteLevel with GPT-2's pattern; returns add_prefix_space.
bool read_pre_tokenizer(const json& p, const std::string& file) {
  const json* byte_level = &p;
  std::string key = "pre_tokenizer";
  if (type_of(p) == "Sequence" && p.contains("pretokenizers") && p["pretokenizers"].is_array() &&
      p["pretokenizers"].size() == 1) {
    byte_level = &p["pretokenizers"][0];
    key = "pre_tokenizer.pretokenizers[0]";
  }
  if (type_of(*byte_level) != "ByteLevel") {
    refuse(file, key + ".type",
           str_cat("'", quoted_input(type_of(*byte_level)),
                   "' is not supported (expected ByteLevel: byte-level BPE as GPT-2 "
                   "and GPT-NeoX ship it)"));
  }
  if (!flag(*byte_level, "use_regex", true, file, key)) {
    refuse(file, key + ".use_regex", "false is not supported (expected GPT-2's split pattern)");
  }
  return flag(*byte_level, "add_prefix_space", false, file, key);
}

void check_model_options(const json& m, const std::string& file) {
  if (type_of(m) != "BPE") {
    refuse(file, "model.type", str_cat("'", quoted_input(type_of(m)), "' is not supported (expected BPE)"));
  }
  if (m.contains("dropout") && !m["dropout"].is_null() && !(m["dropout"].is_number() && m["dropout"] == 0)) {
    refuse(file, "model.dropout", "BPE dropout is not supported (expected null)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (m.contains(key) && !m[key].is_null() && !(m[key].is_string() && m[key].get<std::string>().empty())) {
      refuse(file, str_cat("model.", key), "not supported in byte-level BPE (expected null or \"\")");
    }
  }
  if (flag(m, "byte_fallback", false, file, "model")) refuse(file, "model.byte_fallback", "true is not supported");
  if (flag(m, "ignore_merges", false, file, "model")) refuse(file, "model.ignore_merges", "true is not supported");
}

// Only steps that add nothing to the ids: ByteLevel (offsets only) or none.
void check_passive(const json& section, const char* key, const std::string& file) {
  const std::string type = type_of(section);
  if (!type.empty() && type != "ByteLevel") {
    refuse(file, str_cat(key, ".type"),
           str_cat("'", quoted_input(type), "' is not supported (expected null or ByteLevel)"));
  }
}

std::vector<AddedToken> read_added_tokens(const json& list, const std::string& file) {
  std::vector<AddedToken> out;
  if (list.is_null()) return out;
  if (!list.is_array()) refuse(file, "added_tokens", "expected a list");
  for (size_t i = 0; i < list.size(); ++i) {
    const json& t = list[i];
    const std::string key = str_cat("added_tokens[", i, "]");
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || !t.contains("content") ||
        !t["content"].is_string() || t["content"].get<std::string>().empty()) {
      refuse(file, key, "expected {\"id\": integer, \"content\": non-empty text, ...}");
    }
    for (const char* option : {"single_word", "lstrip", "rstrip"}) {
      if (flag(t, option, false, file, key)) refuse(file, str_cat(key, ".", option), "true is not supported");
    }
    const int64_t id = t["id"].get<int64_t>();
    if (id < 0) refuse(file, key + ".id", "expected an id >= 0");
    out.push_back({id, t["content"].get<std::string>(), flag(t, "special", false, file, key)});
  }
  return out;
}

BpeModel read_tokenizer_json(const std::string& path, BpeTokenizerOptions& options) {
  const json doc = read_json_file(path, limits::kTokenizerBytes);
  if (!doc.is_object()) throw InputError(path + ": expected a JSON object");
  if (!doc.contains("model")) refuse(path, "model", "missing (expected the tokenizer's model)");
  const json& m = doc["model"];
  check_model_options(m, path);
  options.nfc = read_normalizer(doc.value("normalizer", json()), path);
  if (!doc.contains("pre_tokenizer")) refuse(path, "pre_tokenizer", "missing (expected ByteLevel)");
  options.add_prefix_space = read_pre_tokenizer(doc["pre_tokenizer"], path);
  check_passive(doc.value("post_processor", json()), "post_processor", path);
  check_passive(doc.value("decoder", json()), "decoder", path);
  options.added_tokens = read_added_tokens(doc.value("added_tokens", json()), path);
  if (!m.contains("vocab")) refuse(path, "model.vocab", "missing");
  auto vocab = read_vocab(m["vocab"], path, "model.vocab");
  if (!m.contains("merges") || !m["merges"].is_array()) refuse(path, "model.merges", "expected a list");
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(m["merges"].size());
  for (size_t i = 0; i < m["merges"].size(); ++i) {
    const json& merge = m["merges"][i];
    const std::string where = str_cat(path, ": model.merges[", i, "]");
    if (merge.is_string()) {
      merges.push_back(split_merge(merge.get<std::string>(), where));
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
    } else {
      throw InputError(where + ": expected \"left right\" or [\"left\", \"right\"]");
    }
  }
  return BpeModel(std::move(vocab), std::move(merges), path);
}

BpeModel read_vocab_and_merges(const std::string& vocab_path, const std::string& merges_path) {
  auto vocab = read_vocab(read_json_file(vocab_path, limits::kTokenizerBytes), vocab_path, "top level");
  require_regular_file(merges_path, "merges file (the BPE merges beside vocab.json)");
  std::ifstream in(merges_path, std::ios::binary);
  if (!in) throw InputError(merges_path + ": cannot open (expected the BPE merges beside vocab.json)");
  std::vector<std::pair<std::string, std::string>> merges;
  std::string line;
  for (int64_t number = 1; read_bounded_line(in, line, limits::kLineBytes, merges_path, number); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (number == 1 && line.rfind("#version", 0) == 0)) continue;
    merges.push_back(split_merge(line, str_cat(merges_path, ": line ", number)));
  }
  if (in.bad()) throw InputError(merges_path + ": cannot read");
  return BpeModel(std::move(vocab), std::move(merges), vocab_path, merges_path);
}

// A special token's text in tokenizer_config.json or special_tokens_map.json: "text" or {"content": "text"}.
std::optional<std::string> special_text(const json& doc, const std::string& key, const std::string& file) {
  if (!doc.contains(key) || doc[key].is_null()) return std::nullopt;
  const json& v = doc[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  refuse(file, key, "expected the token's text or {\"content\": text}");
}

struct SpecialSource {
  std::optional<int64_t> id;
  std::string from;  // "config.json: eos_token_id"
};

// One special token's id from every file that names it; files that disagree are refused.
std::optional<int64_t> resolve_special(const std::string& folder, const std::string& name, const BpeModel& model,
                                       const std::vector<AddedToken>& added) {
  std::vector<SpecialSource> sources;
  const std::string config = (fs::path(folder) / "config.json").string();
  if (fs::exists(config)) {
    const json doc = read_json_file(config);
    const std::string key = name + "_token_id";
    if (doc.is_object() && doc.contains(key) && !doc[key].is_null()) {
      if (!doc[key].is_number_integer() || doc[key].get<int64_t>() < 0) refuse(config, key, "expected an id >= 0");
      sources.push_back({doc[key].get<int64_t>(), config + ": " + key});
    }
  }
  for (const char* file : {"tokenizer_config.json", "special_tokens_map.json"}) {
    const std::string path = (fs::path(folder) / file).string();
    if (!fs::exists(path)) continue;
    const json doc = read_json_file(path);
    if (!doc.is_object()) continue;
    const auto text = special_text(doc, name + "_token", path);
    if (!text) continue;
    int64_t id = model.find(*text);
    for (const auto& t : added) {
      if (t.content == *text) id = t.id;
    }
    if (id < 0) refuse(path, name + "_token", str_cat("'", quoted_input(*text), "' is not a token of the vocabulary"));
    sources.push_back({id, path + ": " + name + "_token"});
  }
  if (sources.empty()) return std::nullopt;
  for (const auto& s : sources) {
    if (s.id != sources.front().id) {
      throw InputError(
          str_cat(sources.front().from, " is id ", *sources.front().id, " but ", s.from, " is id ", *s.id));
    }
  }
  return sources.front().id;
}

}  // namespace

BpeTokenizer load_tokenizer_folder(const std::string& folder) {
  if (!fs::is_directory(folder)) throw InputError(folder + ": not a folder (expected a model folder)");
  const fs::path dir(folder);
  BpeTokenizerOptions options;
  std::optional<BpeModel> model;
  if (fs::exists(dir / "tokenizer.json")) {
    model.emplace(read_tokenizer_json((dir / "tokenizer.json").string(), options));
  } else if (fs::exists(dir / "vocab.json")) {
    model.emplace(read_vocab_and_merges((dir / "vocab.json").string(), (dir / "merges.txt").string()));
  } else {
    throw InputError(folder + ": no tokenizer.json, nor vocab.json and merges.txt");
  }
  options.eos_id = resolve_special(folder, "eos", *model, options.added_tokens);
  options.bos_id = resolve_special(folder, "bos", *model, options.added_tokens);
  options.pad_id = resolve_special(folder, "pad", *model, options.added_tokens);
  // The special tokens are matched in text as whole tokens, as the Hugging Face tokenizers do.
  for (const auto& id : {options.eos_id, options.bos_id, options.pad_id}) {
    if (!id) continue;
    bool listed = false;
    for (const auto& t : options.added_tokens) listed = listed || t.id == *id;
    if (listed) continue;
    if (model->token(*id) == nullptr) {
      throw InputError(str_cat(folder, ": special token id ", *id, " is not in the vocabulary"));
    }
    options.added_tokens.push_back({*id, model->token_bytes(*id), true});
  }
  return BpeTokenizer(std::move(*model), std::move(options));
}

}  // namespace magic
