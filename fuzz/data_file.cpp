// A data file as JSON Lines (with ids, and as prompt/completion pairs) and as plain text.
#include "fuzz/fuzz_input.h"
#include "lib/data/text_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace magic;
  const std::string path = fuzz::scratch_file("train.jsonl", fuzz::text_of(data, size));
  fuzz::refuse_only_by_name([&] { load_jsonl(path); });
  fuzz::refuse_only_by_name([&] { load_jsonl(path, DocumentFields{"completion", "id", "prompt"}); });
  fuzz::refuse_only_by_name([&] { load_plain_text(path); });
  return 0;
}
