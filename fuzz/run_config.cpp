// A run config in JSON or YAML with dotted overrides, read as magic-run reads it
// (RunConfig::load: the file, the overrides, every field's validation). The input's first line
// holds the override words ("--training.steps 3 --seed=1"), the rest is the file; a first byte
// with its low bit set makes the file YAML.
#include <sstream>

#include "fuzz/fuzz_input.h"
#include "lib/core/config_file.h"
#include "lib/train/run_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace magic;
  if (size == 0) return 0;
  const std::string text = fuzz::text_of(data + 1, size - 1);
  const size_t newline = text.find('\n');
  std::istringstream words(text.substr(0, newline));
  std::vector<std::string> extras;
  for (std::string word; words >> word;) extras.push_back(word);
  const std::string file = newline == std::string::npos ? "" : text.substr(newline + 1);
  const std::string path = fuzz::scratch_file((data[0] & 1) ? "run.yaml" : "run.json", file);
  fuzz::refuse_only_by_name([&] { RunConfig::load(path, parse_overrides(extras, {"seed", "dtype"})); });
  return 0;
}
