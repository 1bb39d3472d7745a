// The tracer's token (docs/tracer.md, "The token"): a secret made per run from the system's random
// source, never from the run's seed (the run's scores stay the same with and without the tracer),
// that every HTTP and WebSocket request must carry, so that a process or page that merely reaches
// the port gets nothing.
#pragma once

#include <string>
#include <string_view>

namespace magic {

// 32 characters of [A-Za-z0-9_-] (192 bits) from getrandom(2).
std::string make_trace_token();

// Throws InputError naming --trace-token unless `token` is 16 to 256 characters of [A-Za-z0-9_-].
void check_trace_token(const std::string& token);

// Whether `given` equals `token`, in a time that does not depend on where they differ.
bool token_matches(std::string_view given, std::string_view token);

// The token a request carries: the `token=` parameter of its target's query, else an
// `Authorization: Bearer` header's, else a `Cookie` named `cookie_name`'s; empty when none.
std::string request_token(std::string_view target, std::string_view authorization, std::string_view cookie,
                          std::string_view cookie_name);

}  // namespace magic
