#include "tests/flag_refusal.h"

#include <vector>

#include "lib/core/strings.h"
#include "tests/support.h"

namespace magic::testing {

std::string flag_refusal(const std::function<void(int, char**)>& parse, const std::string& args) {
  std::vector<std::string> words{"tool"};
  for (const std::string& word : split(args, ' ')) {
    if (!word.empty()) words.push_back(word);
  }
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  const std::string refused = input_error_of([&] { parse(static_cast<int>(argv.size()), argv.data()); });
  return refused.empty() ? "(accepted)" : refused;
}

}  // namespace magic::testing
