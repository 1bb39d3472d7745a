// The first divergence (docs/magic-check.md, "First divergence"): the distributed run and the
// reference record the same named tensors at their trace points (lib/trace); the earliest record
// in the run's order that differs is where the difference began, named with the ranks whose
// pieces are off. The distributed ranks write a dump folder; rank 0 compares it with the
// reference's records, held in memory.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "checks/check_settings.h"
#include "lib/distributed/parallel/data_parallel.h"
#include "lib/trace/dump_sink.h"

namespace magic::checks {

// Records larger than this are not kept: a check of a big --config says so instead.
constexpr int64_t kMaxTraceBytes = int64_t{512} << 20;

// The bytes one run's records take (the reference's: every step's activations, gradients and
// updates, REPLAY's cotangents and score contributions): estimate_dump_bytes of its config.
int64_t trace_record_bytes(const CheckSettings& s);

// Why `s` cannot name a first divergence ("" when it can): fp64 or fp32, and for the lm workload
// records that fit in kMaxTraceBytes. Below fp32 one record cannot tell a bug from rounding.
std::string first_divergence_unavailable(const CheckSettings& s);

// The positions, among a step's `rows`, of micro-batch k's rows as a run on dp replicas of mb
// micro-batches each records them (docs/dump-format.md, `micro_batch`): each replica's contiguous
// share (sizes differing by at most one, the larger first), split the same way into mb parts,
// part k of every replica in replica order. The reference records its whole batch so.
std::vector<std::vector<int64_t>> micro_batch_positions(int64_t rows, int64_t dp, int64_t mb);

// Records a Hessian-vector product of step `step` (order "hvp") at the listening sink, each entry
// placed as `layout` places its parameter.
void record_hvp(const TensorTree& hvp, int64_t step, const TraceLayout& layout);

// Keeps this process's trace records while it lives, beside any sink already listening (the
// live tracer of a rank of magic-check: docs/tracer.md).
class TraceRecorder {
 public:
  TraceRecorder() : listening_(&sink_) {}
  const DumpSink& sink() const { return sink_; }

 private:
  DumpSink sink_;
  ScopedAddedTraceSink listening_;
};

// Every rank of one distributed run: its records into `folder` (its rank file; once every rank's
// is written, rank 0 writes the manifest), placed by `layout`, the run's (a bridge's two grids). A failure is reported,
// never thrown: the first divergence explains a check, it does not decide one.
void write_rank_trace(const std::string& folder, const DumpSink& sink, const dist::Group& world,
                      const TraceLayout& layout);

// Rank 0: the first divergence of the dump in `folder` from the reference's records: the line, or
// "" when every record both sides made agrees. Records only one side made are left out (a --bite
// run computes the levels up to its mutation's only). Never throws: a dump that cannot be read is
// the line's reason.
std::string first_divergence(const std::string& folder, const std::vector<DumpSink::Entry>& reference,
                             const CheckSettings& s);

// The same for a candidate's records held whole in memory.
std::string first_divergence(const std::vector<DumpSink::Entry>& candidate,
                             const std::vector<DumpSink::Entry>& reference, const CheckSettings& s);

}  // namespace magic::checks
