#include "lib/model/batched_matmul.h"

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <climits>
#include <vector>

#ifdef MAGIC_WITH_BLAS
extern "C" {
void dgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k, const double* alpha,
            const double* a, const int* lda, const double* b, const int* ldb, const double* beta, double* c,
            const int* ldc);
void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k, const float* alpha,
            const float* a, const int* lda, const float* b, const int* ldb, const float* beta, float* c,
            const int* ldc);
}
#endif

namespace magic {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

#ifdef MAGIC_WITH_BLAS

// A row-major matrix [rows, cols] as BLAS's column-major storage sees it: its transpose ('N', the
// rows' stride the leading dimension) or, stored by columns, itself ('T').
struct MatrixLayout {
  char op = 'N';
  int64_t ld = 1;
  bool valid = false;
};

MatrixLayout layout_of(const at::Tensor& t) {
  const int64_t rows = t.size(-2), cols = t.size(-1);
  if (t.stride(-1) == 1 && (rows <= 1 || t.stride(-2) >= std::max<int64_t>(1, cols))) {
    return {'N', rows <= 1 ? std::max<int64_t>(1, cols) : t.stride(-2), true};
  }
  if (t.stride(-2) == 1 && (cols <= 1 || t.stride(-1) >= std::max<int64_t>(1, rows))) {
    return {'T', cols <= 1 ? std::max<int64_t>(1, rows) : t.stride(-1), true};
  }
  return {};
}

// Each matrix's element offset, the batch dimensions taken in row-major order.
std::vector<int64_t> batch_offsets(const at::Tensor& t) {
  std::vector<int64_t> offsets{0};
  for (int64_t d = 0; d < t.dim() - 2; ++d) {
    std::vector<int64_t> next;
    next.reserve(offsets.size() * static_cast<size_t>(t.size(d)));
    for (const int64_t base : offsets) {
      for (int64_t i = 0; i < t.size(d); ++i) next.push_back(base + i * t.stride(d));
    }
    offsets = std::move(next);
  }
  return offsets;
}

template <typename T>
void gemm(char op_b, char op_a, int n, int m, int k, const T* b, int ldb, const T* a, int lda, T* c) {
  const T one = 1, zero = 0;
  if constexpr (std::is_same_v<T, double>) {
    dgemm_(&op_b, &op_a, &n, &m, &k, &one, b, &ldb, a, &lda, &zero, c, &n);
  } else {
    sgemm_(&op_b, &op_a, &n, &m, &k, &one, b, &ldb, a, &lda, &zero, c, &n);
  }
}

// Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: gemm(B's flag, A's flag, n, m, k).
template <typename T>
at::Tensor gemm_each(at::Tensor a, at::Tensor b) {
  MatrixLayout la = layout_of(a), lb = layout_of(b);
  if (!la.valid) a = a.contiguous(), la = layout_of(a);
  if (!lb.valid) b = b.contiguous(), lb = layout_of(b);
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  std::vector<int64_t> shape(a.sizes().begin(), a.sizes().end() - 2);
  shape.push_back(m);
  shape.push_back(n);
  if (k == 0) return at::zeros(shape, a.options());
  at::Tensor c = at::empty(shape, a.options());
  if (c.numel() == 0) return c;
  const std::vector<int64_t> offsets_a = batch_offsets(a), offsets_b = batch_offsets(b);
  const T* pa = a.data_ptr<T>();
  const T* pb = b.data_ptr<T>();
  T* pc = c.data_ptr<T>();
  const auto count = static_cast<int64_t>(offsets_a.size());
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, m * n * k));
  at::parallel_for(0, count, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      gemm<T>(lb.op, la.op, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), pb + offsets_b[i],
              static_cast<int>(lb.ld), pa + offsets_a[i], static_cast<int>(la.ld), pc + i * m * n);
    }
  });
  return c;
}

struct BatchedMatmul : public torch::autograd::Function<BatchedMatmul> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b) {
    ctx->save_for_backward({a, b});
    if (a.scalar_type() == at::kDouble) return gemm_each<double>(a, b);
    return gemm_each<float>(a, b);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const variable_list saved = ctx->get_saved_variables();
    at::Tensor da, db;
    if (ctx->needs_input_grad(0)) da = batched_matmul(grad[0], saved[1].transpose(-2, -1));
    if (ctx->needs_input_grad(1)) db = batched_matmul(saved[0].transpose(-2, -1), grad[0]);
    return {da, db};
  }
};

bool fits_int(const at::Tensor& t) {
  for (int64_t d = t.dim() - 2; d < t.dim(); ++d) {
    if (t.size(d) > INT_MAX || t.stride(d) > INT_MAX) return false;
  }
  return true;
}

#endif

}  // namespace

bool batched_matmul_uses_blas(const at::Tensor& a, const at::Tensor& b) {
#ifdef MAGIC_WITH_BLAS
  const auto plain = [](const at::Tensor& t) {
    return t.defined() && t.device().is_cpu() && t.layout() == at::kStrided && t.has_storage() &&
           !t.key_set().has(c10::DispatchKey::Batched) &&
           (t.scalar_type() == at::kDouble || t.scalar_type() == at::kFloat) && t.dim() >= 3 && fits_int(t);
  };
  return plain(a) && plain(b) && a.scalar_type() == b.scalar_type() && a.dim() == b.dim() &&
         a.sizes().slice(0, a.dim() - 2) == b.sizes().slice(0, b.dim() - 2) && a.size(-1) == b.size(-2);
#else
  (void)a;
  (void)b;
  return false;
#endif
}

at::Tensor batched_matmul(const at::Tensor& a, const at::Tensor& b) {
#ifdef MAGIC_WITH_BLAS
  if (batched_matmul_uses_blas(a, b)) return BatchedMatmul::apply(a, b);
#endif
  return at::matmul(a, b);
}

}  // namespace magic
