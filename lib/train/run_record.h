// run.json: what a magic-run result came from, written beside its scores so that it can be
// reproduced and audited: the tool and its version, the command line, the config file and the
// overrides given, the resolved config (every key as the run read it), the seed, the layout, and
// each input file's size and FNV-1a checksum.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "lib/train/run_config.h"

namespace magic {

// The record as JSON; `command` is the command line's words, `layout` "" for one process.
nlohmann::json run_record(const RunConfig& config, const std::vector<std::string>& command, const std::string& layout);

// Writes <out_dir>/run.json atomically.
void write_run_record(const std::string& out_dir, const nlohmann::json& record);

}  // namespace magic
