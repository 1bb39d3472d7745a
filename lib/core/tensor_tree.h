// TensorTree: an ordered name -> tensor container. Parameters, optimizer state, gradients and
// cotangents are all trees; order is insertion order and is the order of flatten().
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

namespace magic {

class TensorTree {
 public:
  struct Entry {
    std::string name;
    at::Tensor tensor;
  };

  TensorTree() = default;

  // Appends; a duplicate name is a programming error (std::invalid_argument).
  void insert(const std::string& name, at::Tensor tensor);
  void set(const std::string& name, at::Tensor tensor);  // replaces an existing entry

  bool contains(const std::string& name) const { return index_.count(name) > 0; }
  const at::Tensor& at(const std::string& name) const;
  at::Tensor& at(const std::string& name);

  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  std::vector<std::string> names() const;
  std::vector<at::Tensor> tensors() const;
  int64_t numel() const;

  std::vector<Entry>::const_iterator begin() const { return entries_.begin(); }
  std::vector<Entry>::const_iterator end() const { return entries_.end(); }

  // Pure structural operations: each returns a new tree, the receiver is unchanged.
  TensorTree map(const std::function<at::Tensor(const at::Tensor&)>& fn) const;
  TensorTree map_named(const std::function<at::Tensor(const std::string&, const at::Tensor&)>& fn) const;
  TensorTree filter(const std::function<bool(const std::string&, const at::Tensor&)>& keep) const;
  TensorTree detach() const;
  TensorTree clone() const;
  // Detached copies that are fresh autograd leaves.
  TensorTree requires_grad() const;
  TensorTree zeros_like() const;
  TensorTree floating() const;  // the entries of floating dtype
  // Entries whose names start with `prefix`, with the prefix removed / added.
  TensorTree strip_prefix(const std::string& prefix) const;
  TensorTree with_prefix(const std::string& prefix) const;

  // All entries flattened and concatenated in order (entries must share a dtype).
  at::Tensor flatten() const;
  // The inverse of flatten(): a tree shaped like this one holding `flat`'s values.
  TensorTree unflatten(const at::Tensor& flat) const;

  bool same_structure(const TensorTree& other) const;

 private:
  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> index_;
};

// Applies fn entrywise to two trees of the same structure (names in the same order).
TensorTree zip(const TensorTree& a, const TensorTree& b,
               const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& fn);
// Concatenates trees; names must be disjoint.
TensorTree merge(const TensorTree& a, const TensorTree& b);

// A tree named like `like` holding `values` in order (the output of torch::autograd::grad over
// like.tensors(), starting at `offset`), with zeros where a value is undefined (an unused input).
TensorTree with_values(const TensorTree& like, const std::vector<at::Tensor>& values, size_t offset = 0);

// Differentiable reductions over all entries (0-dim tensors).
at::Tensor dot(const TensorTree& a, const TensorTree& b);
at::Tensor norm(const TensorTree& tree);

TensorTree add(const TensorTree& a, const TensorTree& b);
TensorTree scale(const TensorTree& tree, double factor);

}  // namespace magic
