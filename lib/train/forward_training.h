// Forward training: s_{t+1} = step(s_t, batch_t, w) for t = 0..N-1, untraced, saving the
// checkpoints the store wants.
#pragma once

#include <functional>

#include "lib/step/step_function.h"
#include "lib/train/checkpoint_store.h"

namespace magic {

using StepObserver = std::function<void(int64_t step, const TrainState& before, const StepOutput& output)>;

// Returns s_N. `store` may be null (no checkpoints: finite differences, plain training).
TrainState train_forward(const StepFunction& step, const TrainState& initial, const at::Tensor& w,
                         CheckpointStore* store, const StepObserver& observer = {});
// The same from s_`first` (a resumed run starts at its latest checkpoint).
TrainState train_forward_from(const StepFunction& step, int64_t first, const TrainState& state, const at::Tensor& w,
                              CheckpointStore* store, const StepObserver& observer = {});

}  // namespace magic
