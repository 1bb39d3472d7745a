// The dump sink: keeps a copy of every record a rank's trace points make, and writes them as a
// dump folder (docs/dump-format.md). Each rank writes its own safetensors file; one process then
// writes manifest.json, last, so a folder with a manifest is a finished dump.
#pragma once

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "lib/trace/trace_sink.h"

namespace magic {

class DumpSink : public TraceSink {
 public:
  struct Entry {
    TraceRecord record;
    at::Tensor tensor;  // a detached CPU copy
  };

  // Copies `tensor` (detached, so the run's graph is untouched). A record made again (the same
  // record_identity: REPLAY recomputing a training step from a checkpoint) is kept once, as first
  // made.
  void write(const TraceRecord& record, const at::Tensor& tensor) override;
  std::vector<Entry> entries() const;

 private:
  mutable std::mutex mutex_;
  std::vector<Entry> entries_;
  std::set<std::string> identities_;
};

// "rank3.safetensors"
std::string dump_rank_file_name(int64_t rank);

// "r000012": the key of the manifest's record `index` in every rank's file.
std::string dump_record_key(size_t index);

// Writes `entries` as rank `rank`'s file in `folder` (created when missing), keyed "r000000", ...
// in record order, or entry i under dump_record_key(indices[i]) (a rank that makes some of the
// manifest's records: a pipeline stage).
void write_dump_rank_file(const std::string& folder, int64_t rank, const std::vector<DumpSink::Entry>& entries,
                          const std::vector<size_t>& indices = {});

// A named grid's dimensions and every rank's coordinates on it (docs/dump-format.md, "Named meshes").
struct GridCoords {
  std::vector<MeshDim> mesh;
  std::vector<std::vector<int64_t>> coords_by_rank;
};

// Once every rank's file is written: reads their headers back, reassembles each record's shape
// from its pieces' on the record's grid, and writes manifest.json atomically. `records` are every
// rank's records, record i keyed dump_record_key(i) in the file of each rank that holds it; `grids` the named grids
// besides `mesh` (version 3 where there are any).
void write_dump_manifest(const std::string& folder, const std::string& run, const std::vector<MeshDim>& mesh,
                         const std::vector<std::vector<int64_t>>& coords_by_rank,
                         const std::vector<TraceRecord>& records, const std::map<std::string, GridCoords>& grids = {});

// A single process's dump: its file, then the manifest, in a folder that appears at `folder` only
// once both are there (atomic_folder.h): `folder` must be new or empty.
void write_single_process_dump(const std::string& folder, const std::string& run,
                               const std::vector<DumpSink::Entry>& entries);

}  // namespace magic
