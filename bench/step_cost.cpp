// step_cost: what one REPLAY step is made of, in units of one plain training step, and the
// least REPLAY/train that follows from it.
//
// On replay_bench's run (bench/replay_bench_config.h), for each intra-op thread count, the median
// over steps 2 .. K-1 of:
//   plain    step(s_t) untraced: what forward training and REPLAY's recomputation run
//   trace    step(s_t) traced: forward, and the backward with create_graph (trace_step)
//   product  the vector-Jacobian product through the traced step (backward_through), with the
//            cotangent carried from the step before, as REPLAY does
// With O(√N) states held (sqrt), each REPLAY step is traced and its product taken, and all but
// the first of each segment is recomputed once: per step at least trace + product + plain. Two
// threads can at best split that one-thread work evenly between two cores.
//
//   step_cost [--threads 1,2] [--steps 10]
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>

#include "bench/bench_flags.h"
#include "bench/replay_bench_config.h"
#include "lib/core/allocator.h"
#include "lib/core/caching_cpu_allocator.h"
#include "lib/core/seed.h"
#include "lib/core/strings.h"
#include "lib/train/replay_backward.h"

namespace {

using namespace magic;

struct StepCost {
  double plain = 0, trace = 0, product = 0;  // seconds, medians
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

StepCost measure(const LmProblem& problem, int64_t steps, int threads) {
  at::set_num_threads(threads);
  const StepFunction& step = *problem.step;
  TrainState state = problem.initial;
  // Any cotangent costs the same; a seeded normal one on the parameters, as the query gradient is.
  TrainState lambda = zero_cotangent(state);
  at::Generator gen = make_generator(derive_seed(0, "step-cost"));
  lambda.params =
      lambda.params.map([&](const at::Tensor& z) { return at::normal(0.0, 1.0, z.sizes(), gen, z.options()); });
  std::vector<double> plain, trace, product;
  for (int64_t t = 0; t < steps; ++t) {
    auto start = std::chrono::steady_clock::now();
    StepOutput next = step.step(state, t, problem.weights, /*traced=*/false);
    const double plain_s = seconds_since(start);
    start = std::chrono::steady_clock::now();
    TracedStep traced = trace_step(step, state, t, problem.weights);
    const double trace_s = seconds_since(start);
    start = std::chrono::steady_clock::now();
    StepVjp vjp = backward_through(step, std::move(traced), lambda);
    const double product_s = seconds_since(start);
    if (t >= 2) {  // the first steps map the allocator's blocks
      plain.push_back(plain_s);
      trace.push_back(trace_s);
      product.push_back(product_s);
    }
    lambda = std::move(vjp.cotangent);
    state = std::move(next.next);
  }
  return {median(plain), median(trace), median(product)};
}

}  // namespace

int main(int argc, char** argv) {
  magic::keep_freed_memory_in_process();   // as magic-run: lib/core/allocator.h
  magic::install_caching_cpu_allocator();  // lib/core/caching_cpu_allocator.h
  auto flags =
      bench::parse_flags(argc, argv, {{"threads", "1,2"}, {"steps", "10"}}, "step_cost [--threads 1,2] [--steps 10]");
  int64_t steps = 0;
  try {
    steps = std::stoll(flags["steps"]);
  } catch (const std::exception&) {
  }
  if (steps < 3) {
    std::cerr << "step_cost: --steps must be at least 3 (the first two are not counted), got " << flags["steps"]
              << "\n";
    return 2;
  }
  std::vector<int> thread_counts;
  for (const auto& arg : split(flags["threads"], ',')) {
    int threads = 0;
    try {
      threads = std::stoi(arg);
    } catch (const std::exception&) {
    }
    if (threads < 1) {
      std::cerr << "step_cost: --threads must be a comma-separated list of integers >= 1, got " << flags["threads"]
                << "\n";
      return 2;
    }
    thread_counts.push_back(threads);
  }
  const LmProblem problem =
      build_lm_problem(bench::replay_bench_config(steps, "sqrt", std::string(MAGIC_SOURCE_DIR) + "/fixtures"));
  std::cout << "step_cost: GPT 2 layers, d=64, 4 heads, T=128, batch 8, AdamW, fp64; medians of steps 2.." << steps - 1
            << "\n\n";
  std::cout << "| threads | plain ms | trace ms | product ms | trace/plain | product/plain | VJP/plain | sqrt REPLAY "
               "floor/plain |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  std::map<int, StepCost> costs;
  for (const int threads : thread_counts) {
    const StepCost c = costs[threads] = measure(problem, steps, threads);
    std::cout << "| " << threads << " | " << format_fixed(c.plain * 1e3, 1) << " | " << format_fixed(c.trace * 1e3, 1)
              << " | " << format_fixed(c.product * 1e3, 1) << " | " << format_fixed(c.trace / c.plain, 2) << " | "
              << format_fixed(c.product / c.plain, 2) << " | " << format_fixed((c.trace + c.product) / c.plain, 2)
              << " | " << format_fixed((c.trace + c.product + c.plain) / c.plain, 2) << " |" << std::endl;
  }
  if (costs.count(1) && costs.count(2)) {
    const StepCost one = costs[1], two = costs[2];
    std::cout << "\nTwo threads, REPLAY's one-thread work split evenly over two cores: "
              << format_fixed((one.trace + one.product + one.plain) / 2 / two.plain, 2)
              << " two-thread plain steps per REPLAY step (two threads make a plain step "
              << format_fixed(one.plain / two.plain, 2) << "x faster than one)\n";
  }
  return 0;
}
