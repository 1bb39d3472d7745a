// GPT-2's pre-tokenization: text cut into the pieces that BPE then encodes one at a time, by the
// pattern both GPT-2 and GPT-NeoX ship (in their tokenizer.json's ByteLevel pre-tokenizer):
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// written out as a scanner (no regex engine): at each position the first alternative that
// matches wins, and each takes as much as it can.
#pragma once

#include <string>
#include <vector>

namespace magic {

// The pieces of UTF-8 `text`, in order; their concatenation is `text`. `where` names the text in
// the error for invalid UTF-8.
std::vector<std::string> gpt2_split(const std::string& text, const std::string& where);

}  // namespace magic
