#include "lib/trace/dump_sink.h"

#include <filesystem>
#include <optional>
#include <set>
#include <stdexcept>

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/io/atomic_file.h"
#include "lib/io/atomic_folder.h"
#include "lib/io/safetensors.h"
#include "lib/trace/dump_manifest.h"
#include "lib/trace/reassemble.h"

namespace magic {
std::string dump_record_key(size_t index) {
  std::string digits = std::to_string(index);
  return "r" + std::string(digits.size() < 6 ? 6 - digits.size() : 0, '0') + digits;
}

void DumpSink::write(const TraceRecord& record, const at::Tensor& tensor) {
  if (record.kind == "attention") return;  // the tracer's alone: [batch, heads, T, T] per layer and step
  std::lock_guard<std::mutex> lock(mutex_);
  if (identities_.count(record_identity(record))) return;
  at::Tensor copy = tensor.detach().to(at::kCPU).clone().contiguous();
  identities_.insert(record_identity(record));
  entries_.push_back({record, std::move(copy)});
}

std::vector<DumpSink::Entry> DumpSink::entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_;
}

std::string dump_rank_file_name(int64_t rank) {
  return str_cat("rank", rank, ".safetensors");
}

void write_dump_rank_file(const std::string& folder, int64_t rank, const std::vector<DumpSink::Entry>& entries,
                          const std::vector<size_t>& indices) {
  std::filesystem::create_directories(folder);
  TensorTree tensors;
  for (size_t i = 0; i < entries.size(); ++i) {
    tensors.insert(dump_record_key(indices.empty() ? i : indices.at(i)), entries[i].tensor);
  }
  save_safetensors((std::filesystem::path(folder) / dump_rank_file_name(rank)).string(), tensors);
}

void write_dump_manifest(const std::string& folder, const std::string& run, const std::vector<MeshDim>& mesh,
                         const std::vector<std::vector<int64_t>>& coords_by_rank,
                         const std::vector<TraceRecord>& records, const std::map<std::string, GridCoords>& grids) {
  DumpManifest m;
  m.run = run;
  m.mesh = mesh;
  for (const auto& [name, grid] : grids) m.meshes[name] = grid.mesh;
  std::vector<SafetensorsFile> files;
  for (size_t r = 0; r < coords_by_rank.size(); ++r) {
    m.ranks.push_back({static_cast<int64_t>(r), coords_by_rank[r], dump_rank_file_name(static_cast<int64_t>(r)), {}});
    for (const auto& [name, grid] : grids) m.ranks.back().mesh_coords[name] = grid.coords_by_rank.at(r);
    // Shapes only: the whole's shape is all the manifest needs, and the data would double the
    // memory a dump takes at its end (every rank's pieces on the rank that writes the manifest).
    files.push_back(
        load_safetensors((std::filesystem::path(folder) / m.ranks.back().file).string(), SafetensorsRead::kHeaderOnly));
  }
  const auto placed = m.placed_grids();
  for (size_t i = 0; i < records.size(); ++i) {
    const std::string key = dump_record_key(i);
    const PlacedGrid& grid = placed.at(records[i].mesh);
    // Zero bytes stand in for the data while the pieces are put together, one record at a time.
    std::vector<at::Tensor> stand_ins(files.size());
    std::optional<c10::ScalarType> dtype;
    for (size_t r = 0; r < files.size(); ++r) {
      if (!holds_piece(records[i].placements, grid.coords[r])) continue;
      if (!files[r].tensors.contains(key)) {
        throw std::invalid_argument(
            str_cat("trace: the ranks made different records (", record_place(records[i]), ")"));
      }
      const at::Tensor& piece = files[r].tensors.at(key);
      stand_ins[r] = at::zeros(piece.sizes(), at::kByte);
      dtype = piece.scalar_type();
    }
    const at::Tensor whole = reassemble(grid.dims, grid.coords, stand_ins, records[i].placements).whole;
    m.records.push_back({key, records[i], *dtype, whole.sizes().vec()});
  }
  write_file_atomically((std::filesystem::path(folder) / "manifest.json").string(), dump_manifest_json(m));
}

void write_single_process_dump(const std::string& folder, const std::string& run,
                               const std::vector<DumpSink::Entry>& entries) {
  write_folder_atomically(folder, "--dump", [&](const std::string& dir) {
    write_dump_rank_file(dir, 0, entries);
    std::vector<TraceRecord> records;
    for (const auto& e : entries) records.push_back(e.record);
    write_dump_manifest(dir, run, {}, {{}}, records);
  });
}

}  // namespace magic
