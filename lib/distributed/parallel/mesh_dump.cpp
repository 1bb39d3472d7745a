#include "lib/distributed/parallel/mesh_dump.h"

#include "lib/core/strings.h"

namespace magic::dist {

std::string write_mesh_dump(const std::string& folder, const std::string& run,
                            const std::vector<DumpSink::Entry>& entries, const Group& world,
                            const TraceLayout& layout) {
  const int rank = world.global_rank();
  // [written, coords...]: one row per rank once gathered.
  std::vector<int64_t> mine{1};
  std::string failure;
  try {
    write_dump_rank_file(folder, rank, entries);
  } catch (const std::exception& e) {
    failure = str_cat("rank ", rank, " could not write its records to ", folder, ": ", e.what());
    mine[0] = 0;
  }
  mine.insert(mine.end(), layout.coords.begin(), layout.coords.end());
  const at::Tensor row = at::tensor(mine, at::kLong).unsqueeze(0);
  const at::Tensor rows = world.all_gather(row, 0);
  std::vector<int> unwritten;
  for (int r = 0; r < world.size(); ++r)
    if (rows[r][0].item<int64_t>() == 0) unwritten.push_back(r);
  if (!unwritten.empty()) {
    if (rank == 0) remove_dump_files(folder, world.size());
    if (!failure.empty()) return failure;
    return str_cat("rank ", unwritten.front(), " could not write its records (its log says why)");
  }
  if (rank != 0) return "";
  try {
    std::vector<std::vector<int64_t>> coords;
    for (int r = 0; r < world.size(); ++r) {
      const at::Tensor c = rows[r].slice(0, 1).contiguous();
      coords.emplace_back(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
    }
    std::vector<TraceRecord> records;
    for (const auto& e : entries) records.push_back(e.record);
    write_dump_manifest(folder, run, layout.mesh, coords, records);
  } catch (const std::exception& e) {
    remove_dump_files(folder, world.size());
    return str_cat("the manifest of ", folder, " was not written: ", e.what());
  }
  return "";
}

}  // namespace magic::dist
