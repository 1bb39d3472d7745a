// A dump written by the ranks of a mesh (docs/dump-format.md): the ranks exchange their record
// lists and merge them into the manifest's (a pipeline's stages make different records), each rank
// writes its own file into a hidden folder rank 0 made beside the destination, every rank says
// whether it could, and rank 0,
// once all have, gathers each rank's coordinates, writes the manifest last and renames the folder
// into place (atomic_folder.h). A dump some rank could not finish, or a run killed while writing,
// leaves no folder at the destination, never a half-written one.
#pragma once

#include <string>
#include <vector>

#include "lib/distributed/runtime/group.h"
#include "lib/trace/dump_sink.h"
#include "lib/trace/trace_layout.h"

namespace magic::dist {

// Called by every member of `world` with its own records and layout. Returns "" when the dump is
// finished, or why it is not (the same answer on every rank, except for the manifest, which only
// rank 0 writes). The folder needs to be one every rank can reach (a shared file system), and must
// be new or empty.
std::string write_mesh_dump(const std::string& folder, const std::string& run,
                            const std::vector<DumpSink::Entry>& entries, const Group& world, const TraceLayout& layout);

}  // namespace magic::dist
