#include "lib/model/pipeline_stage.h"

#include "lib/core/error.h"
#include "lib/core/strings.h"

namespace magic {

std::vector<PipelineStage> pipeline_chunks(int64_t n_layers, int64_t pp, int64_t vpp, int64_t stage,
                                           const std::string& what) {
  if (pp < 1) throw InputError(str_cat(what, ": pp=", pp, ": expected an integer >= 1"));
  if (vpp < 1) throw InputError(str_cat(what, ": vpp=", vpp, ": expected an integer >= 1"));
  if (stage < 0 || stage >= pp) throw std::logic_error(str_cat("pipeline_chunks: stage ", stage, " of pp=", pp));
  if (pp > n_layers) {
    throw InputError(str_cat(what, ": pp=", pp, " is more stages than the model's ", n_layers,
                             " layers (each stage holds at least one)"));
  }
  const int64_t chunks = pp * vpp;
  if (n_layers % chunks != 0) {
    throw InputError(str_cat(what, ": the model's ", n_layers, " layers do not split into pp·vpp = ", pp, "·", vpp,
                             " = ", chunks, " chunks of equal length"));
  }
  const int64_t length = n_layers / chunks;
  std::vector<PipelineStage> out;
  for (int64_t v = 0; v < vpp; ++v) {
    const int64_t c = v * pp + stage;
    out.push_back({c * length, (c + 1) * length, c == 0, c == chunks - 1});
  }
  return out;
}

}  // namespace magic
