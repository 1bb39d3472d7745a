// The order in which one pipeline stage runs its micro-batches' forward and backward passes
// (docs/design.md, "Pipeline stages"). Each schedule is a list per stage; the stages' lists fit
// together (every receive's message is sent by an action its peer reaches without waiting on it),
// and the gradients are summed per micro-batch in micro-batch order whatever the schedule, so
// every schedule gives the same bits.
//   GPipe: every forward, then every backward in reverse.
//   1F1B:  pp − stage − 1 forwards to fill the pipe, then one forward and one backward in turn,
//          then the remaining backwards (PipeDream-Flush, Megatron's default).
//   1F1B with vpp virtual stages (Megatron's interleaved schedule): forwards go through the chunks
//          in groups of pp micro-batches; the warm-up is (pp − stage − 1)·2 + (vpp − 1)·pp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace magic::dist {

enum class PipelineSchedule { kGpipe, kOneForwardOneBackward };

// "gpipe" or "1f1b"; InputError naming `what` otherwise.
PipelineSchedule parse_pipeline_schedule(const std::string& text, const std::string& what);
const char* schedule_name(PipelineSchedule schedule);

struct PipelineAction {
  bool forward = true;
  int64_t micro_batch = 0;
  int64_t chunk = 0;  // which of the stage's vpp chunks (its virtual stage)

  bool operator==(const PipelineAction& o) const {
    return forward == o.forward && micro_batch == o.micro_batch && chunk == o.chunk;
  }
};

// InputError naming `what` unless the schedule can run: pp, vpp, micro_batches >= 1; vpp > 1 only
// with pp > 1; under 1F1B at least pp micro-batches, and with vpp > 1 a multiple of pp.
void validate_pipeline_schedule(PipelineSchedule schedule, int64_t pp, int64_t vpp, int64_t micro_batches,
                                const std::string& what);

// Stage `stage`'s actions, 2·micro_batches·vpp of them: each (micro-batch, chunk) forward once,
// and backward once after it.
std::vector<PipelineAction> pipeline_actions(PipelineSchedule schedule, int64_t pp, int64_t vpp, int64_t stage,
                                             int64_t micro_batches);

}  // namespace magic::dist
