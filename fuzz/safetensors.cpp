// A safetensors file (checkpoints, model.init, model folders, score files, dumps): its header and
// its body, read whole.
#include "lib/io/safetensors.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace magic;
  const std::string path = fuzz::scratch_file("file.safetensors", fuzz::text_of(data, size));
  fuzz::refuse_only_by_name([&] { load_safetensors(path); });
  return 0;
}
