// "Did you mean ...?": the known word nearest a misspelt one, for messages about unknown keys.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace magic {

// The edits that turn `a` into `b`: insertions, deletions, substitutions and swaps of two
// neighbouring characters, each one edit (the optimal string alignment distance).
size_t edit_distance(const std::string& a, const std::string& b);

// The candidate nearest `word` where it is near enough to be what `word` misspells (at most a third
// of `word`'s characters edited, at least one, and fewer than the candidate's length), else "".
// Ties go to the first candidate.
std::string nearest_word(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace magic
