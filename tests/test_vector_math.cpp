// vector_erf (lib/core/vector_math.h) against at::erf, the independent oracle: within 4 ulp on a
// wide sweep and at the special values, every tail length, strided input, chunks split over two
// threads; and libmvec really ran where the build has it (some values differ from at::erf's).
#include <gtest/gtest.h>

#include <ATen/Parallel.h>

#include <cmath>
#include <limits>

#include "lib/core/seed.h"
#include "lib/core/vector_math.h"

namespace magic {
namespace {

const double kEps = std::numeric_limits<double>::epsilon();

// The largest |vector_erf − at::erf| in units of 4 ulp of at::erf's value; at most 1 passes.
double worst(const at::Tensor& x) {
  const at::Tensor want = at::erf(x);
  const at::Tensor bound = 4 * kEps * at::clamp_min(want.abs(), std::numeric_limits<double>::min());
  return ((vector_erf(x) - want).abs() / bound).max().item<double>();
}

TEST(VectorErf, IsWithinFourUlpOfAtErfOnAWideSweep) {
  auto gen = make_generator(1);
  const at::Tensor x = at::randn({100003}, gen, at::TensorOptions().dtype(at::kDouble)) * 3.0;
  EXPECT_LE(worst(x), 1.0);
  EXPECT_LE(worst(at::linspace(-7.0, 7.0, 20001, at::kDouble)), 1.0);
  if (vector_math_available()) {  // libmvec ran: its rounding is not at::erf's everywhere
    EXPECT_GT(vector_erf(x).ne(at::erf(x)).sum().item<int64_t>(), 0);
  }
}

TEST(VectorErf, SpecialValuesAreErfs) {
  const double inf = std::numeric_limits<double>::infinity();
  const at::Tensor x = at::tensor({0.0, -0.0, 4.9e-324, -4.9e-324, 1e-300, -1e-20, 6.0, -27.0, 1e300, inf, -inf},
                                  at::TensorOptions().dtype(at::kDouble));
  const at::Tensor y = vector_erf(x);
  EXPECT_LE(worst(x), 1.0);
  EXPECT_TRUE(std::signbit(y[1].item<double>()));  // erf(−0) = −0
  EXPECT_EQ(y[9].item<double>(), 1.0);
  EXPECT_EQ(y[10].item<double>(), -1.0);
  EXPECT_TRUE(std::isnan(vector_erf(at::full({5}, std::nan(""), at::kDouble))[4].item<double>()));
}

TEST(VectorErf, EveryTailLengthStridedInputAndTwoThreadsAgree) {
  auto gen = make_generator(2);
  const at::Tensor x = at::randn({70007}, gen, at::TensorOptions().dtype(at::kDouble));
  for (int64_t n = 0; n <= 9; ++n) {  // the lanes after the last whole vector
    const at::Tensor part = x.narrow(0, 0, n);
    EXPECT_EQ(vector_erf(part).numel(), n);
    if (n > 0) {
      EXPECT_LE(worst(part), 1.0) << n;
    }
  }
  const at::Tensor strided = x.view({-1, 7}).t();  // not contiguous
  EXPECT_EQ(vector_erf(strided).sizes(), strided.sizes());
  EXPECT_LE(worst(strided), 1.0);
  const int threads = at::get_num_threads();
  at::set_num_threads(2);  // chunks of 32768: three of them, the last short
  const at::Tensor two = vector_erf(x);
  at::set_num_threads(1);
  const at::Tensor one = vector_erf(x);
  at::set_num_threads(threads);
  EXPECT_TRUE(at::equal(one, two));
}

TEST(VectorErf, OtherDtypesAreAtErfsExactly) {
  auto gen = make_generator(3);
  const at::Tensor x = at::randn({1001}, gen, at::TensorOptions().dtype(at::kFloat));
  EXPECT_TRUE(at::equal(vector_erf(x), at::erf(x)));
}

}  // namespace
}  // namespace magic
