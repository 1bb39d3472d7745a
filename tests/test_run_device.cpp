// The run's device (lib/core/run_device.h): names and refusals, and the seam itself. The seam's
// tests run on MAGIC_TEST_DEVICE (cpu unless set; scripts/gpu-check.sh sets cuda in a CUDA build),
// where every tensor a run computes must live, and a GPU run's fp64 scores must equal the host's.
#include <gtest/gtest.h>

#include <cstdlib>
#include <mutex>

#include "lib/core/error.h"
#include "lib/core/run_device.h"
#include "lib/core/strings.h"
#include "lib/trace/trace_sink.h"
#include "lib/train/magic_pipeline.h"
#include "tests/support.h"

namespace magic {
namespace {

DeviceKind test_device() {
  const char* name = std::getenv("MAGIC_TEST_DEVICE");
  return parse_device(name != nullptr ? name : "cpu", "MAGIC_TEST_DEVICE");
}

// The InputError's message, or "(no InputError)" (testing::input_error_of).
std::string input_error(const std::function<void()>& fn) {
  const std::string message = testing::input_error_of(fn);
  return message.empty() ? "(no InputError)" : message;
}

TEST(RunDevice, NamesAndRefusals) {
  EXPECT_EQ(parse_device("cpu", "--device"), DeviceKind::kCpu);
  EXPECT_EQ(parse_device("cuda", "--device"), DeviceKind::kCuda);
  EXPECT_EQ(input_error([] { parse_device("tpu", "--device"); }),
            "--device: unknown device 'tpu'; expected cpu or cuda");
  EXPECT_EQ(input_error([] { require_gpu_per_rank(4, 1, "--topology dp=4"); }),
            "--topology dp=4: 4 NCCL ranks but 1 GPU; NCCL needs a GPU for each rank (--backend gloo lets ranks "
            "share one: docs/gpu.md)");
  EXPECT_EQ(input_error([] { require_gpu_per_rank(2, 2, "--topology dp=2"); }), "(no InputError)");
  EXPECT_EQ(input_error([] { require_device(DeviceKind::kCpu, "--device cpu"); }), "(no InputError)");
#ifndef MAGIC_WITH_CUDA
  EXPECT_EQ(cuda_devices(), 0);
  EXPECT_EQ(input_error([] { require_device(DeviceKind::kCuda, "--device cuda"); }),
            "--device cuda: this build has no CUDA (configure against a CUDA LibTorch: docs/gpu.md)");
#endif
}

TEST(RunDevice, RequireOnDeviceNamesTheFirstTensorElsewhere) {
  TensorTree tree;
  tree.insert("a", at::zeros({2}));
  tree.insert("b", at::zeros({2}, at::TensorOptions().device(at::kMeta)));
  EXPECT_NO_THROW(require_on_device(tree.filter([](const std::string& n, const at::Tensor&) { return n == "a"; }),
                                    at::Device(at::kCPU), "parameters"));
  try {
    require_on_device(tree, at::Device(at::kCPU), "parameters");
    ADD_FAILURE() << "a meta tensor passed as the host's";
  } catch (const std::logic_error& e) {
    EXPECT_EQ(std::string(e.what()), "parameters: 'b' is on meta, expected cpu");
  }
}

// Every traced tensor (activations, logits, losses, gradients, updates) and where it lives.
class DeviceAudit : public TraceSink {
 public:
  explicit DeviceAudit(at::Device expected) : expected_(expected) {}
  void write(const TraceRecord& record, const at::Tensor& tensor) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++records_;
    if (first_elsewhere_.empty() && tensor.device() != expected_) {
      first_elsewhere_ = str_cat(record.kind, " '", record.name, "' (", record.phase, ", step ", record.step, ") on ",
                                 tensor.device().str());
    }
  }
  int64_t records() const { return records_; }
  const std::string& first_elsewhere() const { return first_elsewhere_; }

 private:
  at::Device expected_;
  std::mutex mutex_;
  int64_t records_ = 0;
  std::string first_elsewhere_;
};

MagicResult audited_run(DeviceKind device, DeviceAudit* audit) {
  testing::TinyRun tiny;
  tiny.optimizer = "adam";
  tiny.clip = true;
  tiny.steps = 4;
  RunConfig config = testing::tiny_run_config(tiny);
  config.device = device;
  const LmProblem p = build_lm_problem(config);
  std::optional<ScopedTraceSink> listening;
  if (audit != nullptr) listening.emplace(audit);
  return run_magic(*p.step, *p.query, p.initial, p.weights, MagicOptions{});
}

TEST(RunDevice, EveryTensorARunComputesIsOnItsDevice) {
  const DeviceKind kind = test_device();
  require_device(kind, "MAGIC_TEST_DEVICE");
  const at::Device device = current_device(kind);
  DeviceAudit audit(device);
  const MagicResult r = audited_run(kind, &audit);
  EXPECT_GT(audit.records(), 100);  // the forward's activations and each step's trees, at least
  EXPECT_EQ(audit.first_elsewhere(), "") << "run on " << device;
  EXPECT_NO_THROW(require_on_device(r.final_state.params, device, "final parameters"));
  EXPECT_NO_THROW(require_on_device(r.final_state.opt, device, "final optimizer state"));
  EXPECT_NO_THROW(require_on_device(r.query_gradient, device, "query gradient"));
  // The scores are the data weights' gradient: the host's, as the weights are.
  EXPECT_EQ(r.scores.device(), at::Device(at::kCPU));
  // The planted error: the same audit expecting another device names the first record it sees.
  DeviceAudit elsewhere{at::Device(at::kMeta)};
  audited_run(kind, &elsewhere);
  EXPECT_NE(elsewhere.first_elsewhere().find("(forward, step 0) on " + device.str()), std::string::npos)
      << elsewhere.first_elsewhere();
}

TEST(RunDevice, ScoresOnTheTestDeviceEqualTheHostsInFp64) {
  const DeviceKind kind = test_device();
  require_device(kind, "MAGIC_TEST_DEVICE");
  const at::Tensor here = audited_run(kind, nullptr).scores;
  const at::Tensor host = audited_run(DeviceKind::kCpu, nullptr).scores;
  ASSERT_EQ(here.scalar_type(), at::kDouble);
  const double worst = (here - host).abs().max().item<double>() / host.abs().max().item<double>();
  EXPECT_LE(worst, 1e-10) << "scores on " << device_name(kind) << " against the host's";
}

}  // namespace
}  // namespace magic
