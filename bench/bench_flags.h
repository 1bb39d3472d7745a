// The bench programs' flags: "--name value" pairs, each name one of those given with its default.
// Anything else (an unknown flag, a flag without its value, --help) prints the usage and exits 2
// before anything is measured.
#pragma once

#include <cstdlib>
#include <iostream>
#include <map>
#include <string>

namespace magic::bench {

inline std::map<std::string, std::string> parse_flags(int argc, char** argv, std::map<std::string, std::string> flags,
                                                      const std::string& usage) {
  for (int i = 1; i < argc; i += 2) {
    const std::string name = argv[i];
    const auto it = name.rfind("--", 0) == 0 ? flags.find(name.substr(2)) : flags.end();
    if (it == flags.end() || i + 1 >= argc) {
      std::cerr << argv[0] << ": " << (it == flags.end() ? "unknown flag " : "no value for ") << name
                << "\nusage: " << usage << "\n";
      std::exit(2);
    }
    it->second = argv[i + 1];
  }
  return flags;
}

}  // namespace magic::bench
