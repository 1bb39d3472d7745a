#include "tests/support.h"

#include "lib/core/error.h"
#include "lib/core/strings.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace magic::testing {

std::string source_path(const std::string& relative) {
  return std::string(MAGIC_SOURCE_DIR) + "/" + relative;
}

nlohmann::json tiny_run_json(const TinyRun& r) {
  nlohmann::json optimizer = {{"name", r.optimizer}, {"lr", r.optimizer == "sgd" ? 0.5 : 0.01}};
  if (r.optimizer == "sgd") {
    optimizer["momentum"] = 0.9;
    optimizer["weight_decay"] = 0.01;
  } else {
    optimizer["eps_root"] = 1e-10;
    optimizer["weight_decay"] = 0.05;
  }
  if (r.schedule != "constant")
    optimizer["schedule"] = {{"name", r.schedule}, {"warmup_steps", 2}, {"final_lr", 0.001}};
  if (r.clip) optimizer["clip_norm"] = 0.5;
  return {
      {"seed", r.seed},
      {"dtype", "fp64"},
      {"model", {{"vocab", 257}, {"d_model", 8}, {"n_layers", 1}, {"n_heads", 2}, {"max_len", r.max_len}}},
      {"data", {{"train", "text/proverbs.jsonl"}, {"queries", "text/queries.jsonl"}, {"max_documents", r.documents}}},
      {"training",
       {{"steps", r.steps},
        {"batch_size", r.batch_size},
        {"reduction", r.reduction},
        {"weights", r.weights},
        {"checkpoints", r.checkpoints}}},
      {"optimizer", optimizer},
  };
}

RunConfig tiny_run_config(const TinyRun& r) {
  return RunConfig::from_json(tiny_run_json(r), "tiny-run", source_path("fixtures"));
}

LmProblem tiny_lm_problem(const TinyRun& r) {
  return build_lm_problem(tiny_run_config(r));
}

reference::UnrolledLmSetup unrolled_setup(const LmProblem& p, const RunConfig& c) {
  return reference::UnrolledLmSetup{p.model,     p.train,     &p.query->queries(),   *p.stream,
                                    c.reduction, p.optimizer, c.optimizer.clip_norm, p.initial.params,
                                    c.precision, {},          c.label_smoothing,     {},
                                    c.encoder};
}

double relative_error(const at::Tensor& a, const at::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  return (a - b).abs().max().item<double>() / (scale > 0 ? scale : 1.0);
}

namespace {

// `text` as one word for sh: in single quotes, each ' written as '\''.
std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

}  // namespace

CommandOutcome run_command(const std::string& command_line, std::chrono::seconds limit) {
  const auto start = std::chrono::steady_clock::now();
  // timeout(1) makes the command a process group of its own and signals the whole group.
  const std::string limited = str_cat("timeout -k 10 ", limit.count(), " sh -c ", shell_quote(command_line), " 2>&1");
  FILE* pipe = popen(limited.c_str(), "r");
  if (pipe == nullptr) return {-1, "run_command: popen failed for: " + command_line};
  // The output is read up to a deadline of its own: a process that left the command's group
  // (a rank in a process group of its own) can hold the pipe open after timeout(1) has ended
  // the command, and reading to end of file would then wait until ctest kills the whole test.
  const auto deadline = start + limit + std::chrono::seconds(15);
  std::string output;
  std::array<char, 4096> buffer{};
  const int fd = fileno(pipe);
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      output += str_cat("\n(run_command: the output was still open ", limit.count() + 15,
                        " s after the start: a process outside the command's group holds it)\n");
      break;
    }
    pollfd ready{fd, POLLIN, 0};
    if (poll(&ready, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = read(fd, buffer.data(), buffer.size());
    if (n <= 0) break;
    output.append(buffer.data(), static_cast<size_t>(n));
  }
  const int status = pclose(pipe);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if ((code == 124 || code == 137) && std::chrono::steady_clock::now() - start >= limit) {
    output += str_cat("\n(run_command: killed after ", limit.count(), " s)\n");
  }
  return {code, output};
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream content;
  content << in.rdbuf();
  return content.str();
}

std::string documented_output(const std::string& doc, const std::string& command) {
  std::istringstream text(read_file(source_path(doc)));
  std::string shown;
  bool in_example = false;
  for (std::string line; std::getline(text, line);) {
    if (in_example && line.rfind("```", 0) == 0) return shown;
    if (in_example) shown += line + "\n";
    if (line == command) in_example = true;
  }
  return "";
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

std::string input_error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

CheckReport run_check_in_threads(checks::CheckRequest request) {
  if (!request.references) {
    request.references = std::make_shared<const checks::ReferenceRuns>(checks::run_references(request.settings));
  }
  return run_check_in_threads_as_given(request);
}

CheckReport run_check_in_threads_as_given(const checks::CheckRequest& request) {
  CheckReport report;
  dist::run_ranks_in_threads(static_cast<int>(request.settings.topology.world_size()), [&](dist::Runtime& rt) {
    CheckReport r = checks::run_check(request, rt);
    if (rt.rank() == 0) report = r;
  });
  return report;
}

std::string rewrite_safetensors_header(const std::string& file, const std::function<void(nlohmann::json&)>& edit) {
  uint64_t length = 0;
  std::memcpy(&length, file.data(), 8);
  nlohmann::json header = nlohmann::json::parse(file.substr(8, length));
  edit(header);
  const std::string text = header.dump();
  const uint64_t new_length = text.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &new_length, 8);
  return out + text + file.substr(8 + length);
}

std::string write_tiny_run_config(const std::string& name, const TinyRun& run,
                                  const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = tiny_run_json(run);
  j["data"]["train"] = source_path("fixtures/text/proverbs.jsonl");
  j["data"]["queries"] = source_path("fixtures/text/queries.jsonl");
  edit(j);
  const std::string path = ::testing::TempDir() + "/" + name + ".json";
  std::ofstream(path) << j.dump(2);
  return path;
}

std::string test_name(std::string text) {
  for (char& c : text) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return text;
}

std::string fresh_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

CommandOutcome magic_run(const std::string& args) {
  return run_command(std::string(MAGIC_RUN_BINARY) + " " + args);
}

}  // namespace magic::testing
