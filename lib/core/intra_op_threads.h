// Sets ATen's intra-op thread count for a scope and restores the previous count at its end.
// With OpenMP the count is per thread (each thread's own OpenMP setting), and threads started
// later begin with the last count set.
#pragma once

#include <ATen/Parallel.h>

namespace magic {

class IntraOpThreadsScope {
 public:
  explicit IntraOpThreadsScope(int threads) : previous_(at::get_num_threads()) { at::set_num_threads(threads); }
  ~IntraOpThreadsScope() { at::set_num_threads(previous_); }
  IntraOpThreadsScope(const IntraOpThreadsScope&) = delete;
  IntraOpThreadsScope& operator=(const IntraOpThreadsScope&) = delete;

 private:
  int previous_;
};

}  // namespace magic
