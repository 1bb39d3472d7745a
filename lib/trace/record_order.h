// Every rank's records as one list, for a dump's manifest (docs/dump-format.md, "Pieces some ranks
// hold"): the ranks of a pipeline make different records in different orders (stage 0's forward
// first, the last stage's gradients first), and the manifest lists each once.
#pragma once

#include <vector>

#include "lib/trace/trace_record.h"

namespace magic {

// The union of `by_rank`'s records, each once, in an order that keeps every rank's own: a record
// comes after each record some rank made before it. Among records free to go next, the one the
// lowest rank made earliest goes first, so ranks that make the same records keep their order.
// Throws std::invalid_argument naming the record where two ranks place one record differently or
// make common records in contradicting orders.
std::vector<TraceRecord> merged_records(const std::vector<std::vector<TraceRecord>>& by_rank);

}  // namespace magic
