#include "lib/text/gpt2_split.h"

#include "lib/text/unicode_text.h"

namespace magic {
namespace {

// Length of a contraction ('s 't 'm 'd 're 've 'll, lower case only) starting at i, or 0.
size_t contraction(const std::vector<CodePoint>& c, size_t i) {
  if (c[i].value != U'\'' || i + 1 >= c.size()) return 0;
  const char32_t a = c[i + 1].value;
  if (a == U's' || a == U't' || a == U'm' || a == U'd') return 2;
  if (i + 2 >= c.size()) return 0;
  const char32_t b = c[i + 2].value;
  if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return 3;
  return 0;
}

}  // namespace

std::vector<std::string> gpt2_split(const std::string& text, const std::string& where) {
  const std::vector<CodePoint> c = decode_utf8(text, where);
  const size_t n = c.size();
  std::vector<CharClass> kind(n);
  for (size_t i = 0; i < n; ++i) kind[i] = char_class(c[i].value);
  auto run_end = [&](size_t i, CharClass k) {
    while (i < n && kind[i] == k) ++i;
    return i;
  };
  std::vector<std::string> pieces;
  size_t i = 0;
  while (i < n) {
    size_t end = i + contraction(c, i);
    if (end == i) {
      // " ?X+" for X in letters, numbers, others: an optional ASCII space, then a run of one class.
      const bool space_first = c[i].value == U' ' && i + 1 < n && kind[i + 1] != CharClass::kSpace;
      const size_t start = space_first ? i + 1 : i;
      if (kind[start] != CharClass::kSpace) {
        end = run_end(start, kind[start]);
      } else {
        // \s+(?!\S): the whitespace run, less its last character where a non-space follows it;
        // a single space before a non-space falls to \s+ and is taken alone.
        const size_t run = run_end(i, CharClass::kSpace);
        end = (run == n || run - i == 1) ? run : run - 1;
      }
    }
    const size_t from = c[i].offset, to = end < n ? c[end].offset : text.size();
    pieces.push_back(text.substr(from, to - from));
    i = end;
  }
  return pieces;
}

}  // namespace magic
