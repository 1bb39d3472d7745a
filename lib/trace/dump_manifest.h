// A dump's manifest.json (docs/dump-format.md): the ranks' mesh, each rank's coordinates and file,
// and every record in the order the run made them. Parsing checks every field: a manifest is
// untrusted input, and an error names the file and the field.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

#include "lib/trace/trace_record.h"

namespace magic {

// The version written. Version 1 (no micro_batch field, no fused or padded shards) is still read,
// its records taking micro-batch -1.
constexpr int64_t kDumpFormatVersion = 2;

struct DumpRecord {
  std::string key;  // its tensor's name in every rank's safetensors file
  TraceRecord record;
  c10::ScalarType dtype = c10::kDouble;
  std::vector<int64_t> shape;  // the whole tensor's
};

struct DumpRank {
  int64_t rank = 0;
  std::vector<int64_t> coords;  // one per mesh dimension
  std::string file;             // a plain file name inside the dump folder
};

struct DumpManifest {
  int64_t version = kDumpFormatVersion;
  std::string run;
  std::vector<MeshDim> mesh;
  std::vector<DumpRank> ranks;  // ordered by rank
  std::vector<DumpRecord> records;
};

// Throws InputError "<path>: <field>: <what was expected>".
DumpManifest parse_dump_manifest(const std::string& text, const std::string& path);
std::string dump_manifest_json(const DumpManifest& manifest);

// "dp=2,cp=3", or "single process".
std::string mesh_text(const std::vector<MeshDim>& mesh);

}  // namespace magic
