// Reads a dump folder (docs/dump-format.md) into whole tensors, one per record, checking
// everything first: the manifest, every rank's safetensors file, each piece's dtype, that the
// pieces tile the record's shape, and that floating values are finite. A dump is untrusted
// input: every refusal is an InputError of one line naming the file and what is wrong.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "lib/trace/dump_manifest.h"
#include "lib/trace/dump_sink.h"

namespace magic {

struct DumpTensor {
  DumpRecord record;
  at::Tensor whole;
  std::vector<at::Tensor> pieces;  // by rank, as stored
  std::string replicas_differ;     // "" when the replicas agree (reassemble.h)
  double replica_spread = 0.0;
};

struct LoadedDump {
  std::string path;
  DumpManifest manifest;
  std::vector<DumpTensor> tensors;  // in record order

  std::vector<std::vector<int64_t>> coords() const;  // by rank, on the main grid
};

LoadedDump read_dump(const std::string& folder);

// What read_dump(folder) holds once it returns, from the manifest and the files' sizes alone
// (nothing else is read): every rank's file, read whole, and each record put together from pieces
// of several ranks (a shard, zigzag or partial placement; a replicated record is one of its pieces).
// bytes = sum(file sizes) + sum over such records(numel(shape) * element size).
double dump_resident_bytes(const std::string& folder);

// A single process's records as a dump held in memory, without files (a check's reference);
// `label` stands for its path in messages.
LoadedDump dump_in_memory(const std::vector<DumpSink::Entry>& entries, const std::string& label);

}  // namespace magic
