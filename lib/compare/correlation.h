// How closely two score vectors agree, as attribution users judge it:
//   pearson(a, b)    Σ(a-ā)(b-b̄) / sqrt(Σ(a-ā)² Σ(b-b̄)²)
//   spearman(a, b)   pearson of the ranks (ties share their average rank)
//   lowest_k_overlap the share of a's k smallest entries among b's k smallest (the k most
//                    helpful examples, for dQ/dw scores); highest_k_overlap likewise for the largest
// Inputs are 1-D of equal length >= 2, compared in fp64.
#pragma once

#include <ATen/ATen.h>

namespace magic {

double pearson(const at::Tensor& a, const at::Tensor& b);
double spearman(const at::Tensor& a, const at::Tensor& b);
// 1-based average ranks of `x` (ties share the mean of the ranks they span).
at::Tensor average_ranks(const at::Tensor& x);
double lowest_k_overlap(const at::Tensor& a, const at::Tensor& b, int64_t k);
double highest_k_overlap(const at::Tensor& a, const at::Tensor& b, int64_t k);

}  // namespace magic
