#include "lib/train/forward_training.h"

namespace magic {

TrainState train_forward(const StepFunction& step, const TrainState& initial, const at::Tensor& w,
                         CheckpointStore* store, const StepObserver& observer) {
  TrainState s = detach_state(initial);
  const at::Tensor weights = w.detach();
  for (int64_t t = 0; t < step.num_steps(); ++t) {
    if (store != nullptr && store->wants(t)) store->save(t, s);
    StepOutput out = step.step(s, t, weights, /*traced=*/false);
    if (observer) observer(t, s, out);
    s = std::move(out.next);
  }
  return s;
}

}  // namespace magic
