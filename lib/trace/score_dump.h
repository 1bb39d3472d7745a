// magic-run's score files read as one-record dumps, so that magic-compare judges another
// implementation's scores (written in the same format: lib/io/score_file.h) as it judges dumps.
#pragma once

#include <string>
#include <vector>

#include "lib/trace/dump_reader.h"

namespace magic {

struct ScoreDump {
  LoadedDump dump;  // one record, "scores" (kind score, phase replay, order metagradient, no step)
  std::vector<std::string> example_ids, query_ids;
};

// `path`: a scores.safetensors file, or a folder holding one (magic-run's --out).
ScoreDump read_score_dump(const std::string& path);

// `candidate`'s scores in `reference`'s example order: the same example ids (and query ids), or an
// InputError naming what differs.
LoadedDump aligned_scores(const ScoreDump& candidate, const ScoreDump& reference);

}  // namespace magic
