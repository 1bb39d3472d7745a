// Where each value of a config came from: the config file, or a command-line override
// (--optimizer.lr=-1) that set it or an object above it. JsonFields (json_fields.h) names every
// value through it, so an error blames the input the user gave the value in, not always the file.
#pragma once

#include <string>
#include <vector>

namespace magic {

// One override: the dotted key ("training.steps") and its text ("64").
struct ConfigOverride {
  std::string key, value;

  // "--training.steps=64", as it can be given on the command line.
  std::string flag() const { return "--" + key + "=" + value; }
};

class ValueSources {
 public:
  // Every value comes from `file` but those `overrides` set, applied in order (the last wins).
  explicit ValueSources(std::string file, std::vector<ConfigOverride> overrides = {});

  const std::string& file() const { return file_; }

  // The last override that set `field` (a dotted key, "optimizer.lr") or an object above it, or
  // null where the value is the file's. "" is the whole config.
  const ConfigOverride* override_of(const std::string& field) const;

  // The value at `field` for a message: "FILE: optimizer.lr", or the flag that set it
  // ("--optimizer.lr=-1"), followed by the field where the flag set an object above it
  // ("--optimizer={...}: optimizer.lr"). "" gives the file or the flag alone.
  std::string value(const std::string& field) const;

  // The object at `field` as a whole, whose keys may come from several inputs: value(field), then
  // the flags that set keys inside it ("FILE: model (with --model.n_heads=3)").
  std::string object(const std::string& field) const;

 private:
  std::string file_;
  std::vector<ConfigOverride> overrides_;
};

}  // namespace magic
