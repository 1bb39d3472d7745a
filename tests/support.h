// Shared helpers for the test suite: fixture paths, tiny LM problems on the real fixture text,
// and the unrolled reference set up on the same data, init and order.
#pragma once

#include <chrono>
#include <string>

#include <functional>

#include "checks/run_check.h"
#include "lib/distributed/pools/portal.h"
#include "lib/train/run_config.h"
#include "reference/unrolled_lm.h"

namespace magic::testing {

std::string source_path(const std::string& relative);

// A small, fast fp64 LM run on the first documents of fixtures/text/proverbs.jsonl.
struct TinyRun {
  std::string optimizer = "sgd";  // sgd | adam | adamw
  std::string schedule = "constant";
  std::string checkpoints = "sqrt";
  std::string weights = "per_document";
  std::string reduction = "mean";
  bool clip = false;
  int64_t steps = 6;
  int64_t batch_size = 4;
  int64_t max_len = 24;
  int64_t documents = 6;
  uint64_t seed = 0;
};

nlohmann::json tiny_run_json(const TinyRun& run);
// The tiny run's config with absolute data paths and `edit` applied, written to
// <TempDir>/<name>.json for the command-line tools; returns its path.
std::string write_tiny_run_config(
    const std::string& name, const TinyRun& run,
    const std::function<void(nlohmann::json&)>& edit = [](nlohmann::json&) {});
RunConfig tiny_run_config(const TinyRun& run);
LmProblem tiny_lm_problem(const TinyRun& run);

// The unrolled reference on exactly the problem's data, init, order and optimizer.
reference::UnrolledLmSetup unrolled_setup(const LmProblem& problem, const RunConfig& config);

// max |a - b| / max |b| (the absolute error where b is all zeros)
double relative_error(const at::Tensor& a, const at::Tensor& b);

struct CommandOutcome {
  int exit_code;       // -1 if killed by a signal
  std::string output;  // stdout and stderr together
};
// Runs a shell command line, capturing its output. A command still running after `limit` is
// killed with everything it started (exit code 124 and a last line saying so), so that a hang
// fails its test with the output so far, before ctest's own timeout kills the whole program.
CommandOutcome run_command(const std::string& command_line, std::chrono::seconds limit = std::chrono::seconds(240));

std::string read_file(const std::string& path);
// The lines a doc (relative to the source tree) shows under the line `command` of a fenced block,
// up to the fence; "" when the doc has no such line.
std::string documented_output(const std::string& doc, const std::string& command);

// `text` as a GoogleTest parameter name: every character but letters and digits becomes '_'.
std::string test_name(std::string text);
// A JSON Lines file's values, one per line (a trace file's records).
std::vector<nlohmann::json> read_jsonl(const std::string& path);

// <TempDir>/<name>, removed if it exists: an output folder a tool will create.
std::string fresh_dir(const std::string& name);
// The built magic-run with `args`.
CommandOutcome magic_run(const std::string& args);

// The bytes of a safetensors file with its JSON header rewritten by `edit` and its length prefix
// kept consistent: for damaging a file in exactly one field.
std::string rewrite_safetensors_header(const std::string& file, const std::function<void(nlohmann::json&)>& edit);

// The message of the InputError `fn` throws, or "" if it throws none.
std::string input_error_of(const std::function<void()>& fn);

// Sets the process-wide portal wire-tag mode for one scope (a test).
class PortalTagsGuard {
 public:
  explicit PortalTagsGuard(dist::PortalTags mode) : saved_(dist::portal_tags()) { dist::set_portal_tags(mode); }
  ~PortalTagsGuard() { dist::set_portal_tags(saved_); }
  PortalTagsGuard(const PortalTagsGuard&) = delete;
  PortalTagsGuard& operator=(const PortalTagsGuard&) = delete;

 private:
  dist::PortalTags saved_;
};

// A magic-check run with the request's topology as ranks on threads of this process; rank 0's report.
// The references are computed once for all ranks, as magic-check does for ranks that share its
// memory, unless the request carries them.
CheckReport run_check_in_threads(checks::CheckRequest request);
// The same with the request as given: without references, each rank computes its own.
CheckReport run_check_in_threads_as_given(const checks::CheckRequest& request);

}  // namespace magic::testing
