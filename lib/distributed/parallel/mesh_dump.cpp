#include "lib/distributed/parallel/mesh_dump.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <tuple>

#include "lib/core/strings.h"
#include "lib/io/atomic_folder.h"
#include "lib/trace/dump_manifest.h"
#include "lib/trace/record_order.h"

namespace magic::dist {
namespace {

// Rank 0's `text` on every rank of `world`: its length, then its bytes.
std::string text_of_rank_0(const Group& world, const std::string& text) {
  at::Tensor size = at::tensor({static_cast<int64_t>(text.size())}, at::kLong);
  world.broadcast_(size, 0);
  const int64_t n = size.item<int64_t>();
  if (n == 0) return "";
  at::Tensor bytes = at::empty({n}, at::kByte);
  if (world.rank() == 0) std::memcpy(bytes.data_ptr<uint8_t>(), text.data(), text.size());
  world.broadcast_(bytes, 0);
  return std::string(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()), static_cast<size_t>(n));
}

// Every rank's `text`, by rank: lengths, then the bytes padded to the longest.
std::vector<std::string> texts_of_every_rank(const Group& world, const std::string& text) {
  const at::Tensor sizes = world.all_gather(at::tensor({static_cast<int64_t>(text.size())}, at::kLong), 0);
  const int64_t longest = sizes.max().item<int64_t>();
  at::Tensor mine = at::zeros({1, std::max<int64_t>(longest, 1)}, at::kByte);
  std::memcpy(mine.data_ptr<uint8_t>(), text.data(), text.size());
  const at::Tensor all = world.all_gather(mine, 0).contiguous();
  std::vector<std::string> out;
  for (int r = 0; r < world.size(); ++r) {
    const auto* bytes = reinterpret_cast<const char*>(all[r].data_ptr<uint8_t>());
    out.emplace_back(bytes, static_cast<size_t>(sizes[r].item<int64_t>()));
  }
  return out;
}

// The manifest's records (every rank's, merged: record_order.h) and, for each of this rank's
// entries, its index among them. Every rank computes the same, so a refusal is every rank's.
std::pair<std::vector<TraceRecord>, std::vector<size_t>> manifest_records(const Group& world,
                                                                          const std::vector<DumpSink::Entry>& entries) {
  std::vector<TraceRecord> mine;
  for (const auto& e : entries) mine.push_back(e.record);
  std::vector<std::vector<TraceRecord>> by_rank;
  const std::vector<std::string> texts = texts_of_every_rank(world, records_text(mine));
  for (size_t r = 0; r < texts.size(); ++r)
    by_rank.push_back(parse_records_text(texts[r], str_cat("rank ", r, "'s records")));
  std::vector<TraceRecord> merged = merged_records(by_rank);
  std::map<std::string, size_t> index_of;
  for (size_t i = 0; i < merged.size(); ++i) index_of[record_identity(merged[i])] = i;
  std::vector<size_t> indices;
  for (const auto& r : mine) indices.push_back(index_of.at(record_identity(r)));
  return {std::move(merged), std::move(indices)};
}

}  // namespace

std::string write_mesh_dump(const std::string& folder, const std::string& run,
                            const std::vector<DumpSink::Entry>& entries, const Group& world,
                            const TraceLayout& layout) {
  const int rank = world.global_rank();
  // Rank 0 makes the hidden folder every rank writes into; it becomes `folder` only once the
  // manifest is there, and is removed (StagedFolder's destructor) when anything fails.
  std::optional<StagedFolder> staged;
  std::string failure;
  if (rank == 0) {
    try {
      staged.emplace(folder, "--dump");
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  const std::string dir = text_of_rank_0(world, staged ? staged->dir() : "");
  if (dir.empty()) return rank == 0 ? failure : "rank 0 could not make the dump's folder (its log says why)";
  std::vector<TraceRecord> records;
  std::vector<size_t> indices;
  try {
    std::tie(records, indices) = manifest_records(world, entries);
  } catch (const std::exception& e) {
    return str_cat("the manifest of ", folder, " was not written: ", e.what());
  }
  // [written, coords...]: one row per rank once gathered.
  std::vector<int64_t> mine{1};
  try {
    write_dump_rank_file(dir, rank, entries, indices);
  } catch (const std::exception& e) {
    failure = str_cat("rank ", rank, " could not write its records to ", folder, ": ",
                      naming_destination(e.what(), dir, folder));
    mine[0] = 0;
  }
  // Then its coordinates on the main mesh and on each named grid, in the map's order.
  mine.insert(mine.end(), layout.coords.begin(), layout.coords.end());
  for (const auto& [name, grid] : layout.grids) mine.insert(mine.end(), grid.coords.begin(), grid.coords.end());
  const at::Tensor row = at::tensor(mine, at::kLong).unsqueeze(0);
  const at::Tensor rows = world.all_gather(row, 0);
  std::vector<int> unwritten;
  for (int r = 0; r < world.size(); ++r)
    if (rows[r][0].item<int64_t>() == 0) unwritten.push_back(r);
  if (!unwritten.empty()) {
    if (!failure.empty()) return failure;
    return str_cat("rank ", unwritten.front(), " could not write its records (its log says why)");
  }
  if (rank != 0) return "";
  try {
    const auto coords_at = [&](int r, int64_t begin, size_t count) {
      const at::Tensor c = rows[r].slice(0, begin, begin + static_cast<int64_t>(count)).contiguous();
      return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
    };
    std::vector<std::vector<int64_t>> coords;
    std::map<std::string, GridCoords> grids;
    for (int r = 0; r < world.size(); ++r) {
      int64_t begin = 1;
      coords.push_back(coords_at(r, begin, layout.mesh.size()));
      begin += static_cast<int64_t>(layout.mesh.size());
      for (const auto& [name, grid] : layout.grids) {
        grids[name].mesh = grid.mesh;
        grids[name].coords_by_rank.push_back(coords_at(r, begin, grid.mesh.size()));
        begin += static_cast<int64_t>(grid.mesh.size());
      }
    }
    write_dump_manifest(dir, run, layout.mesh, coords, records, grids);
  } catch (const std::exception& e) {
    return str_cat("the manifest of ", folder, " was not written: ", naming_destination(e.what(), dir, folder));
  }
  try {
    staged->publish();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace magic::dist
