// A dump's manifest.json, as magic-compare reads it before it opens any rank's file.
#include "lib/trace/dump_manifest.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace magic;
  fuzz::refuse_only_by_name([&] {
    const DumpManifest manifest = parse_dump_manifest(fuzz::text_of(data, size), "manifest.json");
    manifest.placed_grids();
  });
  return 0;
}
