#include "lib/core/value_sources.h"

#include <utility>

#include "lib/core/strings.h"

namespace magic {
namespace {

// `key` is `field` or an object above it: "optimizer" holds "optimizer.lr"; "" holds everything.
bool holds(const std::string& key, const std::string& field) {
  if (key.empty() || key == field) return true;
  return field.size() > key.size() && field.compare(0, key.size(), key) == 0 && field[key.size()] == '.';
}

}  // namespace

ValueSources::ValueSources(std::string file, std::vector<ConfigOverride> overrides)
    : file_(std::move(file)), overrides_(std::move(overrides)) {}

const ConfigOverride* ValueSources::override_of(const std::string& field) const {
  for (auto o = overrides_.rbegin(); o != overrides_.rend(); ++o) {
    if (holds(o->key, field)) return &*o;
  }
  return nullptr;
}

std::string ValueSources::value(const std::string& field) const {
  const ConfigOverride* o = override_of(field);
  if (o == nullptr) return field.empty() ? file_ : str_cat(file_, ": ", field);
  return o->key == field || field.empty() ? o->flag() : str_cat(o->flag(), ": ", field);
}

std::string ValueSources::object(const std::string& field) const {
  // Flags applied before the one that set the whole object were overwritten by it.
  const ConfigOverride* whole = override_of(field);
  std::vector<std::string> inside;
  for (const ConfigOverride& o : overrides_) {
    if (whole != nullptr && &o <= whole) continue;
    if (o.key != field && holds(field, o.key)) inside.push_back(o.flag());
  }
  const std::string named = value(field);
  return inside.empty() ? named : str_cat(named, " (with ", join(inside, ", "), ")");
}

}  // namespace magic
