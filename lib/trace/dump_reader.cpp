#include "lib/trace/dump_reader.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "lib/core/error.h"
#include "lib/core/input_file.h"
#include "lib/core/input_limits.h"
#include "lib/core/non_finite.h"
#include "lib/core/strings.h"
#include "lib/io/safetensors.h"
#include "lib/trace/reassemble.h"

namespace magic {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  if (!fs::exists(path)) throw InputError(str_cat(path.string(), ": cannot read (a dump folder needs manifest.json)"));
  return read_input_file(path.string(), "dump manifest", limits::kManifestBytes);
}

DumpManifest read_manifest(const std::string& folder) {
  const fs::path root(folder);
  if (!fs::is_directory(root)) throw InputError(str_cat(folder, ": not a dump folder (expected a directory)"));
  const fs::path manifest_path = root / "manifest.json";
  return parse_dump_manifest(read_text(manifest_path), manifest_path.string());
}

}  // namespace

std::vector<std::vector<int64_t>> LoadedDump::coords() const {
  return manifest.coords("");
}

double dump_resident_bytes(const std::string& folder) {
  const DumpManifest m = read_manifest(folder);
  double bytes = 0;
  for (const auto& rank : m.ranks) {
    std::error_code ec;
    const auto size = fs::file_size(fs::path(folder) / rank.file, ec);
    if (!ec) bytes += static_cast<double>(size);  // a missing file is refused by name when read
  }
  for (const auto& d : m.records) {
    // A single process's record, or a replicated one, is one of its pieces: no copy is made.
    const bool copied =
        m.ranks.size() > 1 && std::any_of(d.record.placements.begin(), d.record.placements.end(),
                                          [](const Placement& p) { return p.type != Placement::Type::kReplicate; });
    if (!copied) continue;
    double numel = 1;  // in a double: a hostile manifest's shape may overflow any integer
    for (const int64_t n : d.shape) numel *= static_cast<double>(n);
    bytes += numel * static_cast<double>(c10::elementSize(d.dtype));
  }
  return bytes;
}

LoadedDump read_dump(const std::string& folder) {
  const fs::path root(folder);
  LoadedDump dump;
  dump.path = folder;
  const fs::path manifest_path = root / "manifest.json";
  dump.manifest = read_manifest(folder);
  const DumpManifest& m = dump.manifest;

  std::set<std::string> keys;  // a set: a demo's dump holds thousands of records per file
  for (const auto& d : m.records) keys.insert(d.key);
  std::vector<SafetensorsFile> files;
  for (const auto& rank : m.ranks) {
    const fs::path file = root / rank.file;
    std::error_code ec;  // a name the file system refuses (too long) is an input error, not a throw
    if (!fs::is_regular_file(file, ec)) {
      throw InputError(str_cat(file.string(), ": ", ec ? ec.message() : "missing", " (manifest.json lists it for rank ",
                               rank.rank, ")"));
    }
    files.push_back(load_safetensors(file.string()));
    for (const auto& entry : files.back().tensors) {
      if (!keys.count(entry.name)) {
        throw InputError(str_cat(file.string(), ": tensor '", entry.name, "' is in no manifest record"));
      }
    }
  }
  const auto grids = m.placed_grids();
  for (const auto& d : m.records) {
    const std::string where = str_cat("record '", d.key, "' (", record_place(d.record), ")");
    DumpTensor t;
    t.record = d;
    const PlacedGrid& grid = grids.at(d.record.mesh);
    for (size_t r = 0; r < m.ranks.size(); ++r) {
      const std::string file = (root / m.ranks[r].file).string();
      if (!holds_piece(d.record.placements, grid.coords[r])) {
        if (files[r].tensors.contains(d.key)) {
          throw InputError(str_cat(file, ": ", where, " is there, but its placements give rank ", r, " no piece"));
        }
        t.pieces.emplace_back();
        continue;
      }
      if (!files[r].tensors.contains(d.key)) throw InputError(str_cat(file, ": ", where, " is missing"));
      const at::Tensor& piece = files[r].tensors.at(d.key);
      if (piece.scalar_type() != d.dtype) {
        throw InputError(str_cat(file, ": ", where, " is ", safetensors_dtype_code(piece.scalar_type()),
                                 " but manifest.json says ", safetensors_dtype_code(d.dtype)));
      }
      if (const auto bad = describe_non_finite(piece)) {
        throw InputError(str_cat(file, ": ", where, " holds ", *bad, " (a dump records finite values)"));
      }
      t.pieces.push_back(piece);
    }
    try {
      Reassembled whole = reassemble(grid.dims, grid.coords, t.pieces, d.record.placements);
      t.whole = whole.whole;
      t.replicas_differ = whole.replicas_differ;
      t.replica_spread = whole.replica_spread;
    } catch (const InputError& e) {
      throw InputError(str_cat(manifest_path.string(), ": ", where, ": the pieces do not tile the tensor: ", e.what()));
    }
    if (!t.whole.sizes().equals(d.shape)) {
      throw InputError(str_cat(manifest_path.string(), ": ", where, ": the pieces make shape ", t.whole.sizes(),
                               " but the manifest says ", c10::IntArrayRef(d.shape)));
    }
    dump.tensors.push_back(std::move(t));
  }
  return dump;
}

LoadedDump dump_in_memory(const std::vector<DumpSink::Entry>& entries, const std::string& label) {
  LoadedDump dump;
  dump.path = label;
  dump.manifest.run = label;
  dump.manifest.ranks.push_back({0, {}, "", {}});
  for (const auto& e : entries) {
    DumpTensor t;
    t.record = {"", e.record, e.tensor.scalar_type(), e.tensor.sizes().vec()};
    t.whole = e.tensor;
    t.pieces = {e.tensor};
    dump.tensors.push_back(std::move(t));
  }
  return dump;
}

}  // namespace magic
