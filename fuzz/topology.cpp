// A --topology string: parsed, then printed and parsed again (the canonical form must read back).
#include <cstdlib>

#include "fuzz/fuzz_input.h"
#include "lib/distributed/runtime/topology.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace magic;
  fuzz::refuse_only_by_name([&] {
    const dist::TopologySpec spec = dist::TopologySpec::parse(fuzz::text_of(data, size));
    if (dist::TopologySpec::parse(spec.str()).str() != spec.str()) std::abort();
    spec.world_size();
  });
  return 0;
}
