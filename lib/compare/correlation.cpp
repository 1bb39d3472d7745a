#include "lib/compare/correlation.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <stdexcept>
#include <vector>

namespace magic {
namespace {

std::vector<double> values(const at::Tensor& x) {
  const at::Tensor flat = x.detach().to(at::kDouble).contiguous().reshape({-1});
  return std::vector<double>(flat.data_ptr<double>(), flat.data_ptr<double>() + flat.numel());
}

void check_pair(const at::Tensor& a, const at::Tensor& b) {
  if (a.dim() != 1 || b.dim() != 1 || a.numel() != b.numel() || a.numel() < 2) {
    throw std::invalid_argument("correlation: expected two 1-D tensors of equal length >= 2");
  }
}

std::set<int64_t> lowest(const std::vector<double>& v, int64_t k) {
  std::vector<int64_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) { return v[i] < v[j]; });
  return std::set<int64_t>(order.begin(), order.begin() + std::min<int64_t>(k, static_cast<int64_t>(v.size())));
}

}  // namespace

double pearson(const at::Tensor& a, const at::Tensor& b) {
  check_pair(a, b);
  const at::Tensor x = a.detach().to(at::kDouble), y = b.detach().to(at::kDouble);
  const at::Tensor dx = x - x.mean(), dy = y - y.mean();
  return ((dx * dy).sum() / (dx.pow(2).sum() * dy.pow(2).sum()).sqrt()).item<double>();
}

at::Tensor average_ranks(const at::Tensor& x) {
  const std::vector<double> v = values(x);
  std::vector<int64_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) { return v[i] < v[j]; });
  std::vector<double> ranks(v.size());
  for (size_t start = 0; start < order.size();) {
    size_t end = start;
    while (end + 1 < order.size() && v[order[end + 1]] == v[order[start]]) ++end;
    const double rank = (static_cast<double>(start + end) / 2.0) + 1.0;  // the mean of ranks start+1..end+1
    for (size_t i = start; i <= end; ++i) ranks[order[i]] = rank;
    start = end + 1;
  }
  return at::tensor(ranks, at::kDouble);
}

double spearman(const at::Tensor& a, const at::Tensor& b) {
  check_pair(a, b);
  return pearson(average_ranks(a), average_ranks(b));
}

double lowest_k_overlap(const at::Tensor& a, const at::Tensor& b, int64_t k) {
  check_pair(a, b);
  const auto sa = lowest(values(a), k), sb = lowest(values(b), k);
  int64_t common = 0;
  for (int64_t i : sa) common += sb.count(i);
  return static_cast<double>(common) / static_cast<double>(sa.size());
}

double highest_k_overlap(const at::Tensor& a, const at::Tensor& b, int64_t k) {
  return lowest_k_overlap(-a.to(at::kDouble), -b.to(at::kDouble), k);
}

}  // namespace magic
