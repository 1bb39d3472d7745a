#include "lib/train/forward_training.h"

#include "lib/core/strings.h"
#include "lib/distributed/runtime/progress.h"

namespace magic {

TrainState train_forward(const StepFunction& step, const TrainState& initial, const at::Tensor& w,
                         CheckpointStore* store, const StepObserver& observer) {
  return train_forward_from(step, 0, initial, w, store, observer);
}

TrainState train_forward_from(const StepFunction& step, int64_t first, const TrainState& state, const at::Tensor& w,
                              CheckpointStore* store, const StepObserver& observer) {
  TrainState s = detach_state(state);
  const at::Tensor weights = w.detach();
  dist::PhaseScope phase("training");
  for (int64_t t = first; t < step.num_steps(); ++t) {
    dist::set_phase(str_cat("training step ", t));
    if (store != nullptr && store->wants(t)) store->save(t, s);
    StepOutput out = step.step(s, t, weights, /*traced=*/false);
    if (observer) observer(t, s, out);
    s = std::move(out.next);
  }
  return s;
}

}  // namespace magic
