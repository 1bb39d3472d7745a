// Runs a child process for the bench programs: its output (stdout and stderr together), wall
// time and peak resident memory (wait4's, which covers the child's waited-for descendants: a
// launcher's ranks).
#pragma once

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace magic::bench {

struct ChildRun {
  int exit_code = -1;
  std::string output;
  double wall_s = 0, peak_rss_mib = 0;
};

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
  for (ssize_t n; (n = read(fds[0], buffer, sizeof buffer)) > 0;) {
    r.output.append(buffer, static_cast<size_t>(n));
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
