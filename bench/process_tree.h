// The resident memory of a process and all its descendants together (a launcher and the ranks it
// spawned), read from /proc; and a command run with that sum sampled while it runs, its peak kept.
// wait4's ru_maxrss is the largest single process's, not the sum of many ranks'.
#pragma once

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace magic::bench {

// Σ RSS over `root` and its descendants, in bytes (0 once they are gone).
inline int64_t tree_rss_bytes(pid_t root) {
  std::map<pid_t, std::vector<pid_t>> children;
  std::map<pid_t, int64_t> rss_pages;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return 0;
  while (const dirent* entry = readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(entry->d_name));
    if (pid <= 0) continue;
    std::ifstream stat("/proc/" + std::string(entry->d_name) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // Fields after the command (which may hold spaces): state ppid ... ; field 24 is rss in pages.
    std::istringstream after(line.substr(line.rfind(')') + 2));
    std::string field;
    std::vector<std::string> fields;
    while (after >> field) fields.push_back(field);
    if (fields.size() < 22) continue;
    children[static_cast<pid_t>(std::atoi(fields[1].c_str()))].push_back(pid);
    rss_pages[pid] = std::atoll(fields[21].c_str());
  }
  closedir(proc);
  int64_t pages = 0;
  std::vector<pid_t> stack{root};
  while (!stack.empty()) {
    const pid_t pid = stack.back();
    stack.pop_back();
    pages += rss_pages[pid];
    for (pid_t child : children[pid]) stack.push_back(child);
  }
  return pages * sysconf(_SC_PAGESIZE);
}

struct TreeRun {
  int exit_code = -1;
  double wall_s = 0;
  int64_t peak_tree_bytes = 0;  // the largest Σ RSS seen, sampled every 20 ms
};

// Runs `command` through /bin/sh with its output discarded, sampling its process tree's memory.
inline TreeRun run_sampling_tree(const std::string& command) {
  TreeRun run;
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", (command + " > /dev/null 2>&1").c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    run.peak_tree_bytes = std::max(run.peak_tree_bytes, tree_rss_bytes(pid));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  run.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

}  // namespace magic::bench
