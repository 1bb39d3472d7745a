// The precision mutations of the catalog (mutations.h), planted as variants of MixedPrecision
// (lib/step/mixed_precision.h), the object both workloads' steps apply their precision policy
// through. An empty name, or a mutation of another kind, gives the correct object.
#pragma once

#include <memory>
#include <string>

#include "lib/step/mixed_precision.h"

namespace magic::checks {

// Not in the catalog: "scaled-gradient:1.05" multiplies every reduced gradient by 1.05 (to measure
// the smallest scale error a precision still detects; bench/precision_sensitivity.cpp).
inline constexpr const char* kScaledGradientPrefix = "scaled-gradient:";

// Whether `mutation` is one of the precision mutations (or a scaled-gradient measurement).
bool is_precision_mutation(const std::string& mutation);

// `world_size` is what fp16-predivide-underflow divides by.
std::shared_ptr<const MixedPrecision> planted_precision(const std::string& mutation, const PrecisionPolicy& policy,
                                                        int world_size = 1);

}  // namespace magic::checks
