#include "checks/phase_progress.h"

#include <iostream>

#include "lib/core/stop_signal.h"
#include "lib/core/strings.h"

namespace magic::checks {

namespace {

// Lines, not a redrawn bar: stderr is shared with the launcher's messages.
constexpr double kInterval = 10.0;

}  // namespace

PhaseProgress::PhaseProgress(std::string label, int64_t total)
    : label_(label), total_(total), meter_(std::move(label), total, std::cerr, /*terminal=*/false, kInterval) {
  meter_.quiet_when_quick();
}

void PhaseProgress::update(int64_t done) {
  throw_if_stop_requested(str_cat(label_, ", step ", done, " of ", total_));
  meter_.update(done);
}

void PhaseProgress::finish() {
  meter_.finish();
}

}  // namespace magic::checks
