// A dump's manifest.json (docs/dump-format.md): the ranks' mesh (and, from version 3, further named
// grids over the same ranks), each rank's coordinates and file, and every record in the order the
// run made them, each placed on one grid. Parsing checks every field: a manifest is
// untrusted input, and an error names the file and the field.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lib/trace/trace_record.h"

namespace magic {

// The newest version read. Writers write 2, 3 where the dump has named grids, or 4 where a
// placement names the coordinates that hold a piece (`on`, pipeline stages); version 1 (no
// micro_batch field, no fused or padded shards) is still read, its records taking micro-batch -1.
constexpr int64_t kDumpFormatVersion = 4;

struct DumpRecord {
  std::string key;  // its tensor's name in every rank's safetensors file
  TraceRecord record;
  c10::ScalarType dtype = c10::kDouble;
  std::vector<int64_t> shape;  // the whole tensor's
};

struct DumpRank {
  int64_t rank = 0;
  std::vector<int64_t> coords;                              // one per mesh dimension
  std::string file;                                         // a plain file name inside the dump folder
  std::map<std::string, std::vector<int64_t>> mesh_coords;  // on each named grid
};

// A grid as records are reassembled on it: its dimensions as messages name them, and every rank's
// coordinates on it, by rank.
struct PlacedGrid {
  std::vector<MeshDim> dims;
  std::vector<std::vector<int64_t>> coords;
};

struct DumpManifest {
  int64_t version = kDumpFormatVersion;
  std::string run;
  std::vector<MeshDim> mesh;
  std::map<std::string, std::vector<MeshDim>> meshes;  // named grids over the same ranks (version 3)
  std::vector<DumpRank> ranks;                         // ordered by rank
  std::vector<DumpRecord> records;

  // Grid `name` ("" the main one), its dimensions named as messages name them: a named grid's
  // prefixed with its name ("encoder dp"), so that a diagnosis says which grid a rank is on.
  std::vector<MeshDim> grid(const std::string& name) const;
  // Every rank's coordinates on grid `name`, by rank.
  std::vector<std::vector<int64_t>> coords(const std::string& name) const;
  // Every grid by name ("" the main one), built once for a loop over the records.
  std::map<std::string, PlacedGrid> placed_grids() const;
};

// Throws InputError "<path>: <field>: <what was expected>".
DumpManifest parse_dump_manifest(const std::string& text, const std::string& path);
std::string dump_manifest_json(const DumpManifest& manifest);

// A rank's records as text for the rank that writes the manifest (what a record is and how it is
// placed, without data), and back; parse_records_text throws InputError naming `what`.
std::string records_text(const std::vector<TraceRecord>& records);
std::vector<TraceRecord> parse_records_text(const std::string& text, const std::string& what);

// "dp=2,cp=3", or "single process".
std::string mesh_text(const std::vector<MeshDim>& mesh);
// mesh_text of the main grid, then each named one: "dp=2,cp=2; encoder: dp=4".
std::string grids_text(const DumpManifest& manifest);

}  // namespace magic
