// What every fuzz harness shares: the input as text, a file holding it for the readers that take a
// path (in one scratch folder per process, removed at exit), and the rule that decides a finding.
//   A reader may refuse its input only with InputError (the user's fault: exit 2, one line). A
//   crash, a sanitizer report, a hang, an allocation past the bound, or any other exception is a
//   finding: `refuse_only_by_name` lets it escape so that libFuzzer (or replay_main.cpp) stops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace magic::fuzz {

std::string text_of(const uint8_t* data, size_t size);

// `content` written to <scratch>/<name> (a name may hold one folder: "model/config.json");
// returns the path. The scratch folder is made on first use and removed when the process exits.
std::string scratch_file(const std::string& name, const std::string& content);

// <scratch>/<name>, a folder, emptied.
std::string scratch_folder(const std::string& name);

// Runs `read`; an InputError is a refusal by name (fine; printed with MAGIC_FUZZ_SHOW_REFUSALS set;
// its constructor escapes the input's raw bytes: error.h), anything else escapes as a finding.
void refuse_only_by_name(const std::function<void()>& read);

// The parts of an input that holds several files, split at "\n--8<--\n" into at most `most` parts
// (the last keeps any further separators): a two-file harness's vocab and merges, a dump's
// manifest and rank files.
std::vector<std::string> split_parts(const std::string& text, size_t most);

}  // namespace magic::fuzz
