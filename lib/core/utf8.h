// UTF-8 as the data and the reports need it: where a text stops being UTF-8, and text shown with
// each byte that is not UTF-8 as the four characters \xNN, so a terminal, a TSV or a JSON string
// never receives a raw byte.
#pragma once

#include <cstddef>
#include <string>

namespace magic {

// The length of the valid UTF-8 sequence that starts at text[i], or 0 where the bytes there are
// not one (a stray continuation byte, a sequence cut short, an overlong form, a surrogate, a code
// point above U+10FFFF).
size_t utf8_sequence_length(const std::string& text, size_t i);

// The offset of the first byte of `text` that does not begin a valid UTF-8 sequence, or npos.
size_t first_invalid_utf8(const std::string& text);

// The four characters \xNN of a byte.
std::string byte_escape(unsigned char byte);

// `text` as valid UTF-8: every byte that does not begin a valid sequence becomes \xNN.
std::string printable_text(const std::string& text);

// `text` for one line: printable_text, with tab, newline and carriage return written as \t, \n
// and \r. A backslash stays as it is for a terminal's row (for reading, not parsing back); with
// `escape_backslash` it is written \\ too, so that the escapes can be undone (scores.tsv's fields).
std::string one_line_text(const std::string& text, bool escape_backslash = false);

// Text from an input file shown inside an error message: printable_text with every control
// character (C0 and DEL, so no terminal escape sequence) as \xNN too, and cut after
// `max_characters` (npos: never) with "..." so one huge token cannot flood the terminal.
std::string quoted_input(const std::string& text, size_t max_characters = 80);

}  // namespace magic
