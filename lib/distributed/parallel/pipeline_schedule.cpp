#include "lib/distributed/parallel/pipeline_schedule.h"

#include <algorithm>

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/core/utf8.h"

namespace magic::dist {

PipelineSchedule parse_pipeline_schedule(const std::string& text, const std::string& what) {
  if (text == "gpipe") return PipelineSchedule::kGpipe;
  if (text == "1f1b") return PipelineSchedule::kOneForwardOneBackward;
  throw InputError(str_cat(what, ": unknown schedule '", quoted_input(text), "'; expected gpipe or 1f1b"));
}

const char* schedule_name(PipelineSchedule schedule) {
  return schedule == PipelineSchedule::kGpipe ? "gpipe" : "1f1b";
}

void validate_pipeline_schedule(PipelineSchedule schedule, int64_t pp, int64_t vpp, int64_t micro_batches,
                                const std::string& what) {
  if (pp < 1 || vpp < 1 || micro_batches < 1) {
    throw InputError(str_cat(what, ": pp=", pp, ", vpp=", vpp, ", mb=", micro_batches, ": expected each >= 1"));
  }
  if (vpp > 1 && pp == 1) {
    throw InputError(
        str_cat(what, ": vpp=", vpp, " without pp: virtual stages interleave the chunks of pp > 1 stages"));
  }
  if (schedule != PipelineSchedule::kOneForwardOneBackward) return;
  if (micro_batches < pp) {
    throw InputError(str_cat(what, ": mb=", micro_batches, " micro-batches are fewer than the pp=", pp,
                             " stages, which 1F1B needs to fill the pipeline (use more micro-batches or gpipe)"));
  }
  if (vpp > 1 && micro_batches % pp != 0) {
    throw InputError(str_cat(what, ": mb=", micro_batches, " is not a multiple of pp=", pp,
                             ", which the interleaved 1F1B schedule (vpp=", vpp, ") needs"));
  }
}

namespace {

// The k-th forward (or backward) of a stage under the interleaved order: micro-batches in groups
// of pp go through the chunks in turn, forwards from the first chunk, backwards from the last.
PipelineAction interleaved(int64_t k, bool forward, int64_t pp, int64_t vpp) {
  const int64_t group = k / pp, chunk = group % vpp;
  return {forward, (k / (pp * vpp)) * pp + k % pp, forward ? chunk : vpp - 1 - chunk};
}

}  // namespace

std::vector<PipelineAction> pipeline_actions(PipelineSchedule schedule, int64_t pp, int64_t vpp, int64_t stage,
                                             int64_t micro_batches) {
  validate_pipeline_schedule(schedule, pp, vpp, micro_batches, "pipeline schedule");
  const int64_t M = micro_batches;
  std::vector<PipelineAction> out;
  if (schedule == PipelineSchedule::kGpipe) {
    for (int64_t v = 0; v < vpp; ++v) {
      for (int64_t m = 0; m < M; ++m) out.push_back({true, m, v});
    }
    for (int64_t v = vpp; v-- > 0;) {
      for (int64_t m = M; m-- > 0;) out.push_back({false, m, v});
    }
    return out;
  }
  const int64_t total = M * vpp;
  const int64_t warmup = std::min(total, vpp == 1 ? pp - stage - 1 : (pp - stage - 1) * 2 + (vpp - 1) * pp);
  for (int64_t k = 0; k < warmup; ++k) out.push_back(interleaved(k, true, pp, vpp));
  for (int64_t i = 0; i < total - warmup; ++i) {
    out.push_back(interleaved(warmup + i, true, pp, vpp));
    out.push_back(interleaved(i, false, pp, vpp));
  }
  for (int64_t i = total - warmup; i < total; ++i) out.push_back(interleaved(i, false, pp, vpp));
  return out;
}

}  // namespace magic::dist
