// A model folder's vocab.json and merges.txt (the input holds both, split at "\n--8<--\n"),
// loaded and then used on a fixed text.
#include "fuzz/fuzz_input.h"
#include "lib/text/tokenizer_folder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace magic;
  const std::vector<std::string> parts = fuzz::split_parts(fuzz::text_of(data, size), 2);
  const std::string folder = fuzz::scratch_folder("bpe");
  fuzz::scratch_file("bpe/vocab.json", parts[0]);
  fuzz::scratch_file("bpe/merges.txt", parts.size() > 1 ? parts[1] : "");
  fuzz::refuse_only_by_name([&] {
    const BpeTokenizer tokenizer = load_tokenizer_folder(folder);
    tokenizer.decode(tokenizer.encode("Hello world, 2026 \xc3\xa9t\xc3\xa9"));
  });
  return 0;
}
