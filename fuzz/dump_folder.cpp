// A whole dump folder, as magic-compare reads it: manifest.json and up to four rank files (the
// input holds them in that order, split at "\n--8<--\n"), read (every cross-file check: the
// manifest's keys, dtypes and shapes against the files', the pieces tiling each record), sized
// for memory from the manifest, then compared with itself.
#include "fuzz/fuzz_input.h"
#include "lib/trace/dump_comparison.h"
#include "lib/trace/dump_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace magic;
  const std::vector<std::string> parts = fuzz::split_parts(fuzz::text_of(data, size), 5);
  const std::string folder = fuzz::scratch_folder("dump");
  fuzz::scratch_file("dump/manifest.json", parts[0]);
  for (size_t r = 1; r < parts.size(); ++r)
    fuzz::scratch_file("dump/rank" + std::to_string(r - 1) + ".safetensors", parts[r]);
  fuzz::refuse_only_by_name([&] {
    dump_resident_bytes(folder);
    const LoadedDump dump = read_dump(folder);
    compare_dumps(dump, dump, CompareOptions{});
  });
  return 0;
}
