// A model folder's tokenizer.json, loaded and then used on a fixed text and its ids decoded.
#include "fuzz/fuzz_input.h"
#include "lib/text/tokenizer_folder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace magic;
  const std::string folder = fuzz::scratch_folder("tokenizer");
  fuzz::scratch_file("tokenizer/tokenizer.json", fuzz::text_of(data, size));
  fuzz::refuse_only_by_name([&] {
    const BpeTokenizer tokenizer = load_tokenizer_folder(folder);
    tokenizer.decode(tokenizer.encode("Hello world, 2026 \xc3\xa9t\xc3\xa9 <|endoftext|>"));
  });
  return 0;
}
