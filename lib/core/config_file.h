// Run configs as files: JSON, or YAML (by the extension .yaml / .yml) read into the same JSON
// value, and dotted overrides from the command line (--training.steps 64) applied on top.
//   YAML scalars: plain ones read as null (~, null), true/false, integers, then numbers, else
//   text; quoted ones are always text. Mappings need text keys, given once.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

#include "lib/core/value_sources.h"

namespace magic {

// InputError naming the file, and the line and column, for a file that does not parse (a tab in
// YAML's indentation named as one).
nlohmann::json read_config_file(const std::string& path);

// `config` with each override set, in order; the objects on a key's path are made where absent.
// An override's text reads as a YAML scalar (or as JSON where it starts with [ or {).
// InputError naming the override where a key is empty or runs through a value that is no object.
nlohmann::json apply_overrides(nlohmann::json config, const std::vector<ConfigOverride>& overrides);

// The overrides among command-line words: "--a.b VALUE" or "--a.b=VALUE" (a key with a dot, or
// one of `top_level_keys`, the config's values outside any section: "--seed 3").
// InputError for any other word (`extras`: what the flag parser did not know).
std::vector<ConfigOverride> parse_overrides(const std::vector<std::string>& extras,
                                            const std::vector<std::string>& top_level_keys = {});

}  // namespace magic
