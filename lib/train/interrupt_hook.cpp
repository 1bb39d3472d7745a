#include "lib/train/interrupt_hook.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "lib/core/error.h"
#include "lib/core/strings.h"

namespace magic {
namespace {

struct InterruptPoint {
  RunPhase phase;
  int64_t step;
};

std::optional<InterruptPoint> parse_interrupt_point() {
  const char* value = std::getenv("MAGIC_INTERRUPT_AT");
  if (value == nullptr || *value == '\0') return std::nullopt;
  const std::string text = value;
  const auto bad = [&] {
    return InputError("MAGIC_INTERRUPT_AT=" + text + ": expected training:STEP or replay:STEP, optionally :rank=R");
  };
  const std::vector<std::string> parts = split(text, ':');
  if (parts.size() < 2 || parts.size() > 3) throw bad();
  InterruptPoint p{};
  if (parts[0] == "training") {
    p.phase = RunPhase::kTraining;
  } else if (parts[0] == "replay") {
    p.phase = RunPhase::kReplay;
  } else {
    throw bad();
  }
  if (parts[1].empty() || parts[1].find_first_not_of("0123456789") != std::string::npos) throw bad();
  p.step = std::stoll(parts[1]);
  if (parts.size() == 3) {
    if (parts[2].rfind("rank=", 0) != 0) throw bad();
    const char* rank = std::getenv("RANK");
    if ((rank ? std::string(rank) : std::string("0")) != parts[2].substr(5)) return std::nullopt;
  }
  return p;
}

}  // namespace

void interrupt_if_asked(RunPhase phase, int64_t step) {
  static const std::optional<InterruptPoint> point = parse_interrupt_point();
  static int64_t replay_steps = 0;
  if (phase == RunPhase::kReplay) step = ++replay_steps;
  if (point && point->phase == phase && point->step == step) ::kill(::getpid(), SIGKILL);
}

}  // namespace magic
