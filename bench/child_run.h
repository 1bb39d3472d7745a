// Runs a child process for the bench programs: its output (stdout and stderr together), wall
// time and peak resident memory (wait4's, which covers the child's waited-for descendants: a
// launcher's ranks), and the shared libraries it had mapped whenever it wrote (so that two sides
// timed against each other can be shown to use the same BLAS).
#pragma once

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace magic::bench {

// A field of this process's /proc/self/status in KiB ("VmRSS", "VmHWM"), or -1.
inline int64_t status_kib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  }
  return -1;
}

struct ChildRun {
  int exit_code = -1;
  std::string output;
  double wall_s = 0, peak_rss_mib = 0;
  std::set<std::string> libraries;  // the real paths of the shared objects it mapped, seen while it ran
};

// Adds the shared objects process `pid` maps now (/proc/PID/maps), by their real paths.
inline void add_mapped_libraries(pid_t pid, std::set<std::string>& into) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  for (std::string line; std::getline(maps, line);) {
    const size_t path = line.find('/');
    if (path == std::string::npos || line.find(".so", path) == std::string::npos) continue;
    std::error_code ec;
    const std::filesystem::path real = std::filesystem::canonical(line.substr(path), ec);
    into.insert(ec ? line.substr(path) : real.string());
  }
}

// Runs argv with extra environment variables, capturing stdout and stderr together; `on_line`,
// when given, hears each line as the child writes it (to start clients once a server is up).
inline ChildRun run_child(const std::vector<std::string>& argv,
                          const std::vector<std::pair<std::string, std::string>>& env,
                          const std::function<void(const std::string&)>& on_line = {}) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  ChildRun r;
  char buffer[4096];
  size_t heard = 0;  // r.output up to here was passed to on_line
  auto sampled = start - std::chrono::seconds(2);
  for (ssize_t n; (n = read(fds[0], buffer, sizeof buffer)) > 0;) {
    r.output.append(buffer, static_cast<size_t>(n));
    // At most every 2 s: the parent shares the cores with the child it times.
    if (const auto now = std::chrono::steady_clock::now(); now - sampled >= std::chrono::seconds(2)) {
      add_mapped_libraries(pid, r.libraries);
      sampled = now;
    }
    for (size_t end; on_line && (end = r.output.find('\n', heard)) != std::string::npos; heard = end + 1) {
      on_line(r.output.substr(heard, end - heard));
    }
  }
  close(fds[0]);
  int status = 0;
  struct rusage usage {};
  wait4(pid, &status, 0, &usage);
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.peak_rss_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;
  return r;
}

}  // namespace magic::bench
