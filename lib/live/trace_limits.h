// Every bound the tracer's server holds its clients to (docs/tracer.md, "Bounds"): whatever reaches
// the port, the tracer's memory, file descriptors and time stay within these, and a client that
// breaks one is dropped with its reason, the run going on.
#pragma once

#include <chrono>
#include <cstddef>

namespace magic::trace_limits {

// WebSocket clients at once (a slot is taken when the upgrade is accepted, so a burst of upgrades
// cannot pass it); the next is refused with 503.
constexpr int kMaxClients = 16;

// Sockets the server holds open at once, of every kind: its budget of file descriptors, kept apart
// from the run's. Lowered to an eighth of RLIMIT_NOFILE when that is lower, so that clients never
// bring the run near EMFILE; a connection past it is closed as soon as it is accepted.
constexpr int kMaxSockets = 128;

// Connections whose request is not read yet, so not yet known to hold the token: past this many
// the oldest is closed to make room, so idle connections cannot keep a viewer out.
constexpr int kMaxWaitingRequests = 64;

// How long a client has to send its whole request (slow loris).
constexpr std::chrono::milliseconds kRequestTime{5000};

// A request's headers and body: the viewer's requests are far smaller.
constexpr size_t kMaxRequestBytes = size_t{16} << 10;

// A frame from a client: control messages are a few KiB.
constexpr size_t kMaxFrameBytes = size_t{1} << 20;

// Messages queued for one client (client_queue.h): records past it are dropped and counted;
// other messages past twice it drop the client.
constexpr size_t kQueueBytes = size_t{8} << 20;

// Control messages a client may send per second, with a burst of as many: a viewer sends one per
// change of its picker, so more is a client out of control.
constexpr double kControlMessagesPerSecond = 20;

// Lines the server logs per second of clients it refused or dropped; the rest are counted.
constexpr int kLogLinesPerSecond = 5;

}  // namespace magic::trace_limits
