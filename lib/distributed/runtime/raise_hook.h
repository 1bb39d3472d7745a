// Fault injection for the tests of a rank that fails on its own: MAGIC_RAISE_AT="PHASE" or
// "PHASE:rank=R" makes every rank, or rank R alone, raise a genuine c10::IndexError (an
// index_select past the end of a tensor, as an off-by-one in context parallel's zig-zag pairing
// would) as it enters PHASE (set_phase, progress.h), e.g. MAGIC_RAISE_AT='step gradients at step
// 0:rank=2'. Only a rank connected to its world (a Runtime) raises, never the launcher. Unset in
// normal use; a malformed value is an InputError.
#pragma once

#include <string>

namespace magic::dist {

void raise_if_asked(const std::string& phase, int rank);

}  // namespace magic::dist
