#include "lib/core/run_device.h"

#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>

#include "lib/core/error.h"
#include "lib/core/strings.h"

namespace magic {

DeviceKind parse_device(const std::string& name, const std::string& where) {
  if (name == "cpu") return DeviceKind::kCpu;
  if (name == "cuda") return DeviceKind::kCuda;
  throw InputError(str_cat(where, ": unknown device '", name, "'; expected cpu or cuda"));
}

const char* device_name(DeviceKind kind) {
  return kind == DeviceKind::kCpu ? "cpu" : "cuda";
}

int cuda_devices() {
#ifndef MAGIC_WITH_CUDA
  return 0;
#else
  // Counted without initializing CUDA, which a launcher must not do before it forks its ranks:
  // the driver's /dev/nvidiaN nodes, as many as CUDA_VISIBLE_DEVICES lists where it is set.
  int nodes = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 6 && name.rfind("nvidia", 0) == 0 &&
        std::all_of(name.begin() + 6, name.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); }))
      ++nodes;
  }
  if (nodes == 0) return static_cast<int>(torch::cuda::device_count());  // no device nodes to read: ask CUDA
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    const std::string list = visible;
    const int listed = list.empty() ? 0 : 1 + static_cast<int>(std::count(list.begin(), list.end(), ','));
    return std::min(nodes, listed);
  }
  return nodes;
#endif
}

void require_device(DeviceKind kind, const std::string& where) {
  if (kind == DeviceKind::kCpu) return;
#ifndef MAGIC_WITH_CUDA
  throw InputError(str_cat(where, ": this build has no CUDA (configure against a CUDA LibTorch: docs/gpu.md)"));
#else
  if (cuda_devices() == 0) throw InputError(str_cat(where, ": this machine has no CUDA device"));
#endif
}

void require_gpu_per_rank(int ranks, int gpus, const std::string& layout) {
  if (ranks <= gpus) return;
  throw InputError(str_cat(layout, ": ", ranks, " NCCL ranks but ", gpus, " GPU", gpus == 1 ? "" : "s",
                           "; NCCL needs a GPU for each rank (--backend gloo lets ranks share one: docs/gpu.md)"));
}

at::Device current_device(DeviceKind kind) {
  if (kind == DeviceKind::kCpu) return at::Device(at::kCPU);
  return c10::impl::VirtualGuardImpl(at::kCUDA).getDevice();
}

void use_device(const at::Device& device) {
  if (device.is_cuda()) c10::impl::VirtualGuardImpl(at::kCUDA).setDevice(device);
}

TensorTree to_device(const TensorTree& tree, const at::Device& device) {
  return tree.map([&](const at::Tensor& t) { return t.to(device); });
}

at::Device device_of(const TensorTree& tree) {
  return tree.empty() ? at::Device(at::kCPU) : tree.begin()->tensor.device();
}

void require_on_device(const TensorTree& tree, const at::Device& device, const std::string& what) {
  for (const auto& e : tree) {
    if (e.tensor.defined() && e.tensor.device() != device) {
      throw std::logic_error(
          str_cat(what, ": '", e.name, "' is on ", e.tensor.device().str(), ", expected ", device.str()));
    }
  }
}

}  // namespace magic
