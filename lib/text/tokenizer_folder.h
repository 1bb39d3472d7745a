// Loads a model folder's tokenizer, in either form the Hugging Face ecosystem ships:
//   tokenizer.json            the tokenizers library's file: a BPE model with the ByteLevel
//                             pre-tokenizer (GPT-2, GPT-NeoX); normalizer none or NFC
//   vocab.json + merges.txt   GPT-2's original pair (token -> id; one merge per line, rank order)
// Special tokens (end of text, beginning, padding) come from config.json's *_token_id, or from
// tokenizer_config.json / special_tokens_map.json by their text; they are matched in text as whole
// tokens. Anything the files ask for that we do not implement is refused by its key.
#pragma once

#include <string>

#include "lib/text/bpe_tokenizer.h"

namespace magic {

// Throws InputError naming the file and key on a missing, malformed or unsupported tokenizer.
BpeTokenizer load_tokenizer_folder(const std::string& folder);

}  // namespace magic
