#include "tests/live_run.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <regex>

namespace magic::testing {

BackgroundRun::BackgroundRun(const std::string& args, std::string log, const std::string& binary)
    : log_(std::move(log)) {
  std::filesystem::remove(log_);
  thread_ = std::thread([this, args, binary] {
    outcome_ = run_command(binary + " " + args + " > " + log_ + " 2>&1");
    finished_ = true;
  });
}

BackgroundRun::~BackgroundRun() {
  if (thread_.joinable()) thread_.join();
}

int BackgroundRun::port(std::chrono::seconds limit) {
  const std::regex serving(R"(trace: serving http://127\.0\.0\.1:(\d+)/(\?token=([A-Za-z0-9_-]+))?)");
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    std::smatch m;
    const std::string text = std::filesystem::exists(log_) ? read_file(log_) : "";
    if (std::regex_search(text, m, serving)) {
      token_ = m[3];
      return std::stoi(m[1]);
    }
    if (finished_) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

CommandOutcome BackgroundRun::join() {
  if (thread_.joinable()) thread_.join();
  outcome_.output = std::filesystem::exists(log_) ? read_file(log_) : outcome_.output;
  return outcome_;
}

WatchedRun watch_run(const std::string& args, const std::string& log, const std::string& binary) {
  BackgroundRun run(args, log, binary);
  WatchedRun watched;
  const int port = run.port();
  if (port > 0) {
    TraceClient client(port, "/trace", "", run.token());
    watched.seen = read_stream(client);
  } else {
    watched.seen.error = "the run served no tracer port";
  }
  watched.outcome = run.join();
  return watched;
}

int open_held(int port, const std::string& bytes) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      (!bytes.empty() && send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(bytes.size()))) {
    close(fd);
    return -1;
  }
  return fd;
}

std::vector<int> open_tokenless_flood(int port, int count) {
  const std::string upgrade =
      "GET /trace HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";
  std::vector<int> fds;
  for (int i = 0; i < count; ++i) {
    const int fd = open_held(port, i % 2 == 0 ? "" : upgrade);
    if (fd < 0) {
      close_all(fds);
      return {};
    }
    fds.push_back(fd);
  }
  return fds;
}

std::string connection_fate(int fd) {
  char buffer[64] = {};
  const ssize_t n = recv(fd, buffer, sizeof buffer - 1, MSG_DONTWAIT | MSG_PEEK);
  if (n > 0) {
    const std::string answer(buffer, static_cast<size_t>(n));
    return answer.substr(0, answer.find('\r'));
  }
  if (n == 0 || errno == ECONNRESET) return "closed";
  return "open";
}

std::map<std::string, int> connection_fates(const std::vector<int>& fds) {
  std::map<std::string, int> out;
  for (int fd : fds) ++out[connection_fate(fd)];
  return out;
}

void close_all(const std::vector<int>& fds) {
  for (int fd : fds) close(fd);
}

bool allow_descriptors(rlim_t needed) {
  rlimit l{};
  if (getrlimit(RLIMIT_NOFILE, &l) != 0) return false;
  if (l.rlim_cur >= needed) return true;
  if (l.rlim_max != RLIM_INFINITY && l.rlim_max < needed) return false;
  l.rlim_cur = needed;
  return setrlimit(RLIMIT_NOFILE, &l) == 0;
}

}  // namespace magic::testing
