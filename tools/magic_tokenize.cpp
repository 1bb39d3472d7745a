// magic-tokenize: what a model folder's tokenizer makes of text, and back.
//   magic-tokenize DIR TEXT           the ids of TEXT and each token's text
//   magic-tokenize DIR --encode FILE  FILE: one JSON string per line -> one JSON list of ids per line
//   magic-tokenize DIR --decode FILE  FILE: one JSON list of ids per line -> one JSON string per line
// Exit 0, or 2 for a bad folder, file or line (named).
#include <CLI/CLI.hpp>

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "lib/core/error.h"
#include "lib/core/input_file.h"
#include "lib/core/input_limits.h"
#include "lib/core/json_fields.h"
#include "lib/core/strings.h"
#include "lib/text/tokenizer_folder.h"

namespace {

using namespace magic;
using nlohmann::json;

std::string dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Calls `each(value, where)` for every line of `path` parsed as JSON.
template <typename Each>
void for_each_json_line(const std::string& path, Each each) {
  require_regular_file(path, "file of JSON lines");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open");
  std::string line;
  for (int64_t number = 1; read_bounded_line(in, line, limits::kLineBytes, path, number); ++number) {
    const std::string where = str_cat(path, ": line ", number);
    require_json_nesting(line, where);
    json value;
    try {
      value = json::parse(line);
    } catch (const json::exception& e) {
      throw InputError(str_cat(where, ": invalid JSON: ", json_error_text(e)));
    }
    each(value, where);
  }
}

int run(int argc, char** argv) {
  CLI::App app{
      "magic-tokenize: encode and decode text with a model folder's tokenizer.\n"
      "Example: magic-tokenize models/gpt2 \"Hello world\""};
  std::string folder, text, encode_path, decode_path;
  app.add_option("DIR", folder, "model folder (tokenizer.json, or vocab.json and merges.txt)")->required();
  app.add_option("TEXT", text, "text to show the tokens of");
  auto* encode = app.add_option("--encode", encode_path, "file of JSON strings, one per line");
  auto* decode = app.add_option("--decode", decode_path, "file of JSON lists of ids, one per line");
  encode->excludes(decode);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    throw InputError(str_cat(e.what(), " (run with --help for usage)"));
  }
  const BpeTokenizer tokenizer = load_tokenizer_folder(folder);
  if (!encode_path.empty()) {
    std::string out;
    for_each_json_line(encode_path, [&](const json& value, const std::string& where) {
      if (!value.is_string()) throw InputError(where + ": expected a JSON string");
      out += dump(json(tokenizer.encode(value.get<std::string>(), where))) + "\n";
    });
    std::cout << out;
  } else if (!decode_path.empty()) {
    std::string out;
    for_each_json_line(decode_path, [&](const json& value, const std::string& where) {
      if (!value.is_array()) throw InputError(where + ": expected a JSON list of ids");
      std::vector<int64_t> ids;
      for (const auto& id : value) {
        if (!id.is_number_integer()) throw InputError(where + ": expected integer ids");
        ids.push_back(id.get<int64_t>());
      }
      out += dump(json(tokenizer.decode(ids))) + "\n";
    });
    std::cout << out;
  } else {
    const std::vector<int64_t> ids = tokenizer.encode(text);
    std::cout << ids.size() << " tokens\n";
    for (int64_t id : ids) std::cout << id << "\t" << dump(json(tokenizer.token_bytes(id))) << "\n";
  }
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "magic-tokenize: error: " << e.what() << "\n";
    return magic::kExitBadInput;
  }
}
