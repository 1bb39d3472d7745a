#include "lib/core/vector_math.h"

#include <ATen/Parallel.h>

#if defined(MAGIC_WITH_LIBMVEC)
#include <immintrin.h>

// glibc's vector ABI names: _ZGV, b (SSE) or d (AVX2), N (unmasked), 2 or 4 lanes, v (vector arg).
extern "C" __m128d _ZGVbN2v_erf(__m128d);
extern "C" __m256d _ZGVdN4v_erf(__m256d);
#endif

namespace magic {
namespace {

#if defined(MAGIC_WITH_LIBMVEC)
// Whole lanes through libmvec; the last n mod 4 through one zero-padded lane.
__attribute__((target("avx2"))) void erf_avx2(const double* in, double* out, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) _mm256_storeu_pd(out + i, _ZGVdN4v_erf(_mm256_loadu_pd(in + i)));
  if (i == n) return;
  double tail[4] = {};
  for (int64_t j = i; j < n; ++j) tail[j - i] = in[j];
  _mm256_storeu_pd(tail, _ZGVdN4v_erf(_mm256_loadu_pd(tail)));
  for (int64_t j = i; j < n; ++j) out[j] = tail[j - i];
}

void erf_sse(const double* in, double* out, int64_t n) {
  int64_t i = 0;
  for (; i + 2 <= n; i += 2) _mm_storeu_pd(out + i, _ZGVbN2v_erf(_mm_loadu_pd(in + i)));
  if (i < n) out[i] = _mm_cvtsd_f64(_ZGVbN2v_erf(_mm_set_sd(in[i])));
}
#endif

}  // namespace

bool vector_math_available() {
#if defined(MAGIC_WITH_LIBMVEC)
  return true;
#else
  return false;
#endif
}

at::Tensor vector_erf(const at::Tensor& x) {
#if defined(MAGIC_WITH_LIBMVEC)
  if (x.scalar_type() == at::kDouble && x.device().is_cpu() && x.layout() == at::kStrided) {
    static const bool avx2 = __builtin_cpu_supports("avx2");
    const at::Tensor in = x.contiguous();
    at::Tensor out = at::empty_like(in);
    const double* src = in.data_ptr<double>();
    double* dst = out.data_ptr<double>();
    at::parallel_for(0, in.numel(), 1 << 15, [&](int64_t begin, int64_t end) {
      (avx2 ? erf_avx2 : erf_sse)(src + begin, dst + begin, end - begin);
    });
    return out;
  }
#endif
  return at::erf(x);
}

}  // namespace magic
