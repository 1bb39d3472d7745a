// trace_cost: what a trace point costs (lib/trace/trace_sink.h).
//
//   no sink     a loop of trace_point() calls with no sink attached, against the same loop
//               without them: nanoseconds per call (the record is never built)
//   dump sink   trace_point() into a DumpSink: microseconds per call for tensors of 1 Ki, 64 Ki and
//               1 Mi doubles (the sink copies each tensor)
//   a GPT step  one forward and backward of the demo's model (fixtures/runs/demo.json sizes,
//               batch 8 x 128, fp64), and the share of it that its trace points would take with
//               no sink: (2 + layers + parameters) points per step
// Each figure is the minimum of several runs, the two sides interleaved.
//
//   trace_cost [--repeats 7]
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <chrono>
#include <iostream>

#include "bench/bench_flags.h"
#include "lib/core/allocator.h"
#include "lib/core/caching_cpu_allocator.h"
#include "lib/core/strings.h"
#include "lib/model/gpt.h"
#include "lib/trace/dump_sink.h"

namespace {

using namespace magic;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

TraceRecord make_record(int64_t i) {
  return {"blocks.1.attn.qkv.weight", "gradient", "backward", "first", i, "blocks.1", {}};
}

// The loop both sides share; `with_points` adds one trace point per iteration.
double loop_seconds(int64_t iterations, bool with_points, const at::Tensor& t) {
  volatile int64_t sum = 0;
  const auto start = Clock::now();
  for (int64_t i = 0; i < iterations; ++i) {
    sum = sum + i;
    if (with_points) trace_point(t, [&] { return make_record(i); });
  }
  return seconds_since(start);
}

}  // namespace

int main(int argc, char** argv) {
  const auto flags = bench::parse_flags(argc, argv, {{"repeats", "7"}}, "trace_cost [--repeats 7]");
  const int repeats = std::max(1, std::atoi(flags.at("repeats").c_str()));
  at::set_num_threads(1);
  keep_freed_memory_in_process();  // the allocator magic-run runs with (lib/core/allocator.h)
  install_caching_cpu_allocator();
  const at::Tensor small = at::ones({4}, at::kDouble);

  const int64_t iterations = 20'000'000;
  double bare = 1e30, traced = 1e30;
  for (int r = 0; r < repeats; ++r) {
    bare = std::min(bare, loop_seconds(iterations, false, small));
    traced = std::min(traced, loop_seconds(iterations, true, small));
  }
  const double per_point_ns = (traced - bare) / iterations * 1e9;
  std::cout << "no sink: " << format_fixed(traced / iterations * 1e9, 2) << " ns per iteration with a trace point, "
            << format_fixed(bare / iterations * 1e9, 2) << " ns without: " << format_fixed(per_point_ns, 2)
            << " ns per trace point (min of " << repeats << ", " << iterations << " iterations)\n";

  for (int64_t numel : {int64_t{1} << 10, int64_t{1} << 16, int64_t{1} << 20}) {
    const at::Tensor t = at::randn({numel}, at::kDouble);
    const int calls = numel >= (1 << 20) ? 20 : 200;
    double best = 1e30;
    for (int r = 0; r < repeats; ++r) {
      DumpSink sink;
      ScopedTraceSink scope(&sink);
      const auto start = Clock::now();
      for (int i = 0; i < calls; ++i) trace_point(t, [&] { return make_record(i); });
      best = std::min(best, seconds_since(start) / calls);
    }
    std::cout << "dump sink: " << format_fixed(best * 1e6, 2) << " us per trace point of " << numel << " doubles ("
              << format_fixed(static_cast<double>(numel) * 8 / best / 1e9, 2) << " GB/s)\n";
  }

  GptConfig config;
  config.d_model = 16;
  config.max_len = 128;
  const TensorTree params = gpt_init(config, at::kDouble, 0).requires_grad();
  const at::Tensor ids = at::randint(config.vocab, {8, 128}, at::kLong);
  double step = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    const at::Tensor loss = gpt_forward(config, params, ids).pow(2).mean();
    torch::autograd::grad({loss}, params.tensors());
    step = std::min(step, seconds_since(start));
  }
  const int64_t points = 2 + config.n_layers + static_cast<int64_t>(params.size());
  std::cout << "a GPT step (d_model 16, 2 layers, batch 8 x 128, fp64): " << format_fixed(step * 1e3, 2) << " ms; its "
            << points << " trace points with no sink: " << format_fixed(points * per_point_ns, 1)
            << " ns = " << format_sci(points * per_point_ns * 1e-9 / step, 1) << " of the step\n";
  return 0;
}
