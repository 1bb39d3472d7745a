// A Hugging Face model folder's config.json, read into our model's configuration.
#include "fuzz/fuzz_input.h"
#include "lib/model/hf_model_folder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace magic;
  const std::string folder = fuzz::scratch_folder("model");
  fuzz::scratch_file("model/config.json", fuzz::text_of(data, size));
  fuzz::refuse_only_by_name([&] { read_model_config(folder, 16); });
  return 0;
}
