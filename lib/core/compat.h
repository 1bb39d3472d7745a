// The few LibTorch API differences between Debian's 1.13 and the 2.x CUDA builds, in one place.
//  - c10d: in 1.13 ProcessGroupGloo/NCCL derive from c10d::ProcessGroup; from 2.0 they derive
//    from c10d::Backend (ProcessGroup became a dispatcher over backends). We call the
//    collectives on the concrete backend object, typed as compat::CollectiveBackend.
#pragma once

#include <torch/csrc/api/include/torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

namespace magic::compat {

#if TORCH_VERSION_MAJOR >= 2
using CollectiveBackend = c10d::Backend;
#else
using CollectiveBackend = c10d::ProcessGroup;
#endif

}  // namespace magic::compat
