// The device a run computes on, as data: a config's "device", the tools' --device. Parameters,
// optimizer state, activations, gradients and losses live there; data stays in host memory until
// a step takes its batch (as a DataLoader's batches do), and scores come back to the host.
// A rank computes on cuda:local_rank (one GPU a rank, as NCCL requires; Gloo ranks may share one),
// the calling thread's current CUDA device, which the rank sets when it starts (use_device).
#pragma once

#include <ATen/ATen.h>

#include <string>

#include "lib/core/tensor_tree.h"

namespace magic {

enum class DeviceKind { kCpu, kCuda };

// "cpu" or "cuda"; anything else is an InputError naming `where`.
DeviceKind parse_device(const std::string& name, const std::string& where);
const char* device_name(DeviceKind kind);

// CUDA devices this process sees: 0 in a build against a CPU LibTorch.
int cuda_devices();

// Throws InputError naming `where` unless this build and machine can compute on `kind`.
void require_device(DeviceKind kind, const std::string& where);

// Throws InputError naming `layout` unless `ranks` processes' worth of NCCL ranks each get a GPU
// of their own: NCCL refuses two ranks of one communicator on one GPU ("invalid usage").
void require_gpu_per_rank(int ranks, int gpus, const std::string& layout);

// The calling thread's device for `kind`: the CPU, or its current CUDA device.
at::Device current_device(DeviceKind kind);
// Makes `device` the calling thread's current CUDA device (nothing for the CPU).
void use_device(const at::Device& device);

// Copies of every entry on `device` (the same tensors where they are there already).
TensorTree to_device(const TensorTree& tree, const at::Device& device);
// The device of a tree's entries: its first entry's (the CPU for an empty tree).
at::Device device_of(const TensorTree& tree);
// Throws std::logic_error naming `what` and the first entry that is not on `device`.
void require_on_device(const TensorTree& tree, const at::Device& device, const std::string& what);

}  // namespace magic
