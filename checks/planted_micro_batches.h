// The micro-batch mutation of the catalog (mutations.h), planted as a variant of MicroBatches
// (lib/step/micro_batches.h), the object the LM step splits its rows and normalizes its
// micro-batches through. An empty name, or a mutation of another kind, gives the correct object.
#pragma once

#include <memory>
#include <string>

#include "lib/step/micro_batches.h"

namespace magic::checks {

// Whether `mutation` is planted here (and so nowhere else).
bool is_micro_batch_mutation(const std::string& mutation);

// `count` micro-batches per step (the topology's mb).
std::shared_ptr<const MicroBatches> planted_micro_batches(const std::string& mutation, int64_t count);

}  // namespace magic::checks
