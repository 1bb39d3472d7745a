// The size bounds every reader holds a file to (docs/limits.md). A file past one is refused by
// name before anything its size would allocate; each bound is far above what a real input of its
// kind holds, and below what a hostile one could use to exhaust memory or the stack.
#pragma once

#include <cstdint>

namespace magic::limits {

// A JSON or YAML document's nesting depth ({"a": [[1]]} is 3 deep): a run config, config.json,
// tokenizer.json, a dump manifest, a tracer control message, a JSON Lines record.
constexpr int kNesting = 128;
// The values a YAML document reads into, an alias counted at each use (so "billion laughs" stops).
// A run config holds about a hundred; at a million a bomb took 25 ms and 75 MB to refuse.
constexpr int64_t kYamlValues = 100'000;
// A run config, config.json, tokenizer_config.json, a dump manifest: read whole.
constexpr int64_t kConfigBytes = 64LL << 20;
// tokenizer.json and vocab.json (GPT-NeoX's tokenizer.json is 2.1 MB).
constexpr int64_t kTokenizerBytes = 256LL << 20;
// A dump's manifest.json (a record is about 200 bytes: over a million records).
constexpr int64_t kManifestBytes = 256LL << 20;
// A safetensors header, the format's own bound (huggingface/safetensors: 100 MB).
constexpr int64_t kSafetensorsHeaderBytes = 100'000'000;
// One line of a JSON Lines data file or of merges.txt.
constexpr int64_t kLineBytes = 16LL << 20;

}  // namespace magic::limits
