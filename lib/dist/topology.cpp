#include "lib/dist/topology.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "lib/core/error.h"
#include "lib/core/strings.h"

namespace magic::dist {
namespace {

const std::vector<std::string>& reserved_keys() {
  static const std::vector<std::string> keys{"cp", "fsdp"};
  return keys;
}

[[noreturn]] void reject(const std::string& text, const std::string& why) {
  throw InputError(str_cat("--topology '", text, "': ", why, "; expected key=value[,key=value...] with integers >= 1",
                           " and keys from: ", join(topology_keys(), ", ")));
}

}  // namespace

const std::vector<std::string>& topology_keys() {
  static const std::vector<std::string> keys{"dp"};
  return keys;
}

int64_t TopologySpec::get(const std::string& key, int64_t fallback) const {
  auto it = values.find(key);
  return it == values.end() ? fallback : it->second;
}

int64_t TopologySpec::world_size() const { return dp(); }

std::string TopologySpec::str() const {
  std::vector<std::string> parts;
  for (const auto& key : topology_keys()) {
    if (values.count(key)) parts.push_back(str_cat(key, "=", values.at(key)));
  }
  return join(parts, ",");
}

std::vector<std::pair<std::string, int64_t>> TopologySpec::named_sizes() const {
  std::vector<std::pair<std::string, int64_t>> sizes{{"dp", dp()}};
  if (world_size() != dp()) sizes.emplace_back("world", world_size());
  return sizes;
}

TopologySpec TopologySpec::parse(const std::string& text) {
  TopologySpec spec;
  spec.text = text;
  if (text.empty()) reject(text, "empty topology");
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t eq = item.find('=');
    if (item.empty() || eq == std::string::npos) reject(text, str_cat("'", item, "' is not key=value"));
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    const auto& known = topology_keys();
    if (std::find(reserved_keys().begin(), reserved_keys().end(), key) != reserved_keys().end()) {
      reject(text, str_cat("key '", key, "' is reserved for a later release and not supported yet"));
    }
    if (std::find(known.begin(), known.end(), key) == known.end()) reject(text, str_cat("unknown key '", key, "'"));
    if (spec.values.count(key)) reject(text, str_cat("key '", key, "' given twice"));
    errno = 0;
    char* end = nullptr;
    const long long number = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || errno != 0) reject(text, str_cat(key, "=", value, " is not an integer"));
    if (number < 1) reject(text, str_cat(key, "=", value, " must be >= 1"));
    spec.values[key] = number;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return spec;
}

}  // namespace magic::dist
