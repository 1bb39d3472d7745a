#include "lib/live/trace_token.h"

#include <sys/random.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <stdexcept>

#include "lib/core/error.h"
#include "lib/core/strings.h"

namespace magic {

namespace {

constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
constexpr size_t kMinTokenChars = 16;   // 96 bits at 6 bits a character
constexpr size_t kMaxTokenChars = 256;  // a header's worth, no more

bool token_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

// The value of `name=` in a list of `separator`-separated pairs; empty when absent.
std::string_view pair_value(std::string_view list, std::string_view name, char separator) {
  while (!list.empty()) {
    const size_t end = list.find(separator);
    std::string_view pair = list.substr(0, end);
    while (!pair.empty() && pair.front() == ' ') pair.remove_prefix(1);
    if (pair.size() > name.size() && pair.substr(0, name.size()) == name && pair[name.size()] == '=') {
      return pair.substr(name.size() + 1);
    }
    if (end == std::string_view::npos) break;
    list.remove_prefix(end + 1);
  }
  return {};
}

}  // namespace

std::string make_trace_token() {
  std::array<uint8_t, 24> bytes{};
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = getrandom(bytes.data() + got, bytes.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error("the tracer's token: getrandom failed");
    got += static_cast<size_t>(n);
  }
  // 24 bytes, 6 bits a character: 32 characters.
  std::string token;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t v = (uint32_t{bytes[i]} << 16) | (uint32_t{bytes[i + 1]} << 8) | bytes[i + 2];
    for (int shift = 18; shift >= 0; shift -= 6) token += kAlphabet[(v >> shift) & 63];
  }
  return token;
}

void check_trace_token(const std::string& token) {
  bool ok = token.size() >= kMinTokenChars && token.size() <= kMaxTokenChars;
  for (char c : token) ok = ok && token_char(c);
  if (!ok) {
    throw InputError(str_cat("--trace-token: expected ", kMinTokenChars, " to ", kMaxTokenChars,
                             " characters of A-Z a-z 0-9 _ - (or none, on a loopback --trace-bind), got ", token.size(),
                             " characters"));
  }
}

bool token_matches(std::string_view given, std::string_view token) {
  // Every byte of the token is compared whatever the given one holds: the time tells an attacker
  // nothing of how much of a guess was right.
  unsigned diff = given.size() == token.size() ? 0 : 1;
  for (size_t i = 0; i < token.size(); ++i) {
    const char g = i < given.size() ? given[i] : '\0';
    diff |= static_cast<unsigned char>(g ^ token[i]);
  }
  return diff == 0 && !token.empty();
}

std::string request_token(std::string_view target, std::string_view authorization, std::string_view cookie,
                          std::string_view cookie_name) {
  const size_t query = target.find('?');
  if (query != std::string_view::npos) {
    const std::string_view value = pair_value(target.substr(query + 1), "token", '&');
    if (!value.empty()) return std::string(value);
  }
  constexpr std::string_view bearer = "Bearer ";
  if (authorization.size() > bearer.size() && authorization.substr(0, bearer.size()) == bearer) {
    return std::string(authorization.substr(bearer.size()));
  }
  return std::string(pair_value(cookie, cookie_name, ';'));
}

}  // namespace magic
