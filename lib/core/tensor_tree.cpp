#include "lib/core/tensor_tree.h"

#include <stdexcept>

#include "lib/core/strings.h"

namespace magic {

void TensorTree::insert(const std::string& name, at::Tensor tensor) {
  if (contains(name)) throw std::invalid_argument(str_cat("TensorTree: duplicate name '", name, "'"));
  index_.emplace(name, entries_.size());
  entries_.push_back({name, std::move(tensor)});
}

void TensorTree::set(const std::string& name, at::Tensor tensor) {
  at(name) = std::move(tensor);
}

const at::Tensor& TensorTree::at(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw std::out_of_range(str_cat("TensorTree: no entry '", name, "'"));
  return entries_[it->second].tensor;
}

at::Tensor& TensorTree::at(const std::string& name) {
  auto it = index_.find(name);
  if (it == index_.end()) throw std::out_of_range(str_cat("TensorTree: no entry '", name, "'"));
  return entries_[it->second].tensor;
}

std::vector<std::string> TensorTree::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& e : entries_) out.push_back(e.name);
  return out;
}

std::vector<at::Tensor> TensorTree::tensors() const {
  std::vector<at::Tensor> out;
  out.reserve(entries_.size());
  for (const auto& e : entries_) out.push_back(e.tensor);
  return out;
}

int64_t TensorTree::numel() const {
  int64_t n = 0;
  for (const auto& e : entries_) n += e.tensor.numel();
  return n;
}

TensorTree TensorTree::map(const std::function<at::Tensor(const at::Tensor&)>& fn) const {
  TensorTree out;
  for (const auto& e : entries_) out.insert(e.name, fn(e.tensor));
  return out;
}

TensorTree TensorTree::map_named(const std::function<at::Tensor(const std::string&, const at::Tensor&)>& fn) const {
  TensorTree out;
  for (const auto& e : entries_) out.insert(e.name, fn(e.name, e.tensor));
  return out;
}

TensorTree TensorTree::filter(const std::function<bool(const std::string&, const at::Tensor&)>& keep) const {
  TensorTree out;
  for (const auto& e : entries_) {
    if (keep(e.name, e.tensor)) out.insert(e.name, e.tensor);
  }
  return out;
}

TensorTree TensorTree::detach() const {
  return map([](const at::Tensor& t) { return t.detach(); });
}

TensorTree TensorTree::clone() const {
  return map([](const at::Tensor& t) { return t.detach().clone(); });
}

TensorTree TensorTree::requires_grad() const {
  return map([](const at::Tensor& t) { return t.detach().requires_grad_(t.is_floating_point()); });
}

TensorTree TensorTree::zeros_like() const {
  return map([](const at::Tensor& t) { return at::zeros_like(t); });
}

TensorTree TensorTree::floating() const {
  return filter([](const std::string&, const at::Tensor& t) { return t.is_floating_point(); });
}

TensorTree TensorTree::strip_prefix(const std::string& prefix) const {
  TensorTree out;
  for (const auto& e : entries_) {
    if (e.name.compare(0, prefix.size(), prefix) == 0) out.insert(e.name.substr(prefix.size()), e.tensor);
  }
  return out;
}

TensorTree TensorTree::with_prefix(const std::string& prefix) const {
  TensorTree out;
  for (const auto& e : entries_) out.insert(prefix + e.name, e.tensor);
  return out;
}

at::Tensor TensorTree::flatten() const {
  std::vector<at::Tensor> parts;
  parts.reserve(entries_.size());
  for (const auto& e : entries_) parts.push_back(e.tensor.reshape({-1}));
  if (parts.empty()) return at::empty({0}, at::kDouble);
  return at::cat(parts);
}

TensorTree TensorTree::unflatten(const at::Tensor& flat) const {
  if (flat.dim() != 1 || flat.numel() != numel()) {
    throw std::invalid_argument(
        str_cat("TensorTree::unflatten: expected ", numel(), " values, got shape ", flat.sizes()));
  }
  TensorTree out;
  int64_t offset = 0;
  for (const auto& e : entries_) {
    const int64_t n = e.tensor.numel();
    out.insert(e.name, flat.narrow(0, offset, n).view(e.tensor.sizes()));
    offset += n;
  }
  return out;
}

bool TensorTree::same_structure(const TensorTree& other) const {
  if (size() != other.size()) return false;
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].name != other.entries_[i].name) return false;
    if (entries_[i].tensor.sizes() != other.entries_[i].tensor.sizes()) return false;
  }
  return true;
}

TensorTree zip(const TensorTree& a, const TensorTree& b,
               const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& fn) {
  if (a.size() != b.size()) {
    throw std::invalid_argument(str_cat("zip: trees of ", a.size(), " and ", b.size(), " entries"));
  }
  TensorTree out;
  auto ib = b.begin();
  for (const auto& ea : a) {
    if (ea.name != ib->name) {
      throw std::invalid_argument(str_cat("zip: entry '", ea.name, "' paired with '", ib->name, "'"));
    }
    out.insert(ea.name, fn(ea.tensor, ib->tensor));
    ++ib;
  }
  return out;
}

TensorTree merge(const TensorTree& a, const TensorTree& b) {
  TensorTree out = a;
  for (const auto& e : b) out.insert(e.name, e.tensor);
  return out;
}

TensorTree with_values(const TensorTree& like, const std::vector<at::Tensor>& values, size_t offset) {
  TensorTree out;
  size_t i = offset;
  for (const auto& e : like) {
    const at::Tensor& v = values.at(i++);
    out.insert(e.name, v.defined() ? v : at::zeros_like(e.tensor));
  }
  return out;
}

at::Tensor dot(const TensorTree& a, const TensorTree& b) {
  at::Tensor total;
  auto ib = b.begin();
  if (a.size() != b.size()) throw std::invalid_argument("dot: trees of different sizes");
  for (const auto& ea : a) {
    if (ea.name != ib->name) throw std::invalid_argument(str_cat("dot: '", ea.name, "' vs '", ib->name, "'"));
    at::Tensor term = (ea.tensor * ib->tensor).sum();
    total = total.defined() ? total + term : term;
    ++ib;
  }
  return total.defined() ? total : at::zeros({}, at::kDouble);
}

at::Tensor norm(const TensorTree& tree) {
  return dot(tree, tree).sqrt();
}

TensorTree add(const TensorTree& a, const TensorTree& b) {
  return zip(a, b, [](const at::Tensor& x, const at::Tensor& y) { return x + y; });
}

TensorTree scale(const TensorTree& tree, double factor) {
  return tree.map([factor](const at::Tensor& t) { return t * factor; });
}

}  // namespace magic
