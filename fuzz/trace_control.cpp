// A tracer control message as a WebSocket client sends it; a control it accepts must read back
// from its own JSON (what the server sends the other clients and the ranks).
#include <cstdlib>

#include "fuzz/fuzz_input.h"
#include "lib/live/trace_control.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace magic;
  TraceControl control;
  try {
    control = parse_control_message(fuzz::text_of(data, size));
  } catch (const ControlError&) {
    return 0;
  }
  try {
    parse_control(control_json(control));
  } catch (const ControlError&) {
    std::abort();  // accepted, but its own JSON is refused
  }
  return 0;
}
