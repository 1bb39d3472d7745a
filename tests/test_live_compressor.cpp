// The tracer's compressors against ATen's own reductions (an independent computation of the same
// quantity), including the edges: NaN and infinities, sizes the grid does not divide, k past the
// tensor's size, and a projection whose vector does not fit.
#include <gtest/gtest.h>

#include <cmath>

#include "lib/live/compressor.h"

namespace magic {
namespace {

using nlohmann::json;

std::vector<double> doubles(const json& list) {
  std::vector<double> out;
  for (const json& v : list) out.push_back(v.get<double>());
  return out;
}

TEST(Compressor, StatsEqualATenReductionsInFp64AndFp32) {
  at::manual_seed(1);
  for (const auto dtype : {at::kDouble, at::kFloat, at::kBFloat16}) {
    // A large mean: the shifted sums keep the standard deviation accurate.
    const at::Tensor t = (at::randn({37, 11}, at::kDouble) * 0.01 + 1000.0).to(dtype);
    const json s = compress({Compressor::kStats}, t);
    const at::Tensor d = t.to(at::kDouble);
    EXPECT_EQ(s["count"], t.numel());
    EXPECT_DOUBLE_EQ(s["min"].get<double>(), d.min().item<double>());
    EXPECT_DOUBLE_EQ(s["max"].get<double>(), d.max().item<double>());
    EXPECT_NEAR(s["mean"].get<double>(), d.mean().item<double>(), 1e-12 * 1000);
    EXPECT_NEAR(s["std"].get<double>(), d.std(/*unbiased=*/false).item<double>(), 1e-9);
    EXPECT_NEAR(s["norm"].get<double>(), d.norm().item<double>(), 1e-9 * d.norm().item<double>());
    EXPECT_EQ(s["nan"], 0);
    EXPECT_EQ(s["inf"], 0);
  }
}

TEST(Compressor, StatsCountNanAndInfAndSummarizeOnlyTheFiniteEntries) {
  const at::Tensor t = at::tensor({1.0, NAN, 3.0, INFINITY, -INFINITY, 5.0}, at::kDouble);
  const json s = compress({Compressor::kStats}, t);
  EXPECT_EQ(s["count"], 3);
  EXPECT_EQ(s["nan"], 1);
  EXPECT_EQ(s["inf"], 2);
  EXPECT_DOUBLE_EQ(s["mean"].get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(s["min"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(s["max"].get<double>(), 5.0);
  EXPECT_NEAR(s["std"].get<double>(), std::sqrt(8.0 / 3.0), 1e-15);
  const json none = compress({Compressor::kStats}, at::full({4}, NAN, at::kDouble));
  EXPECT_EQ(none["count"], 0);
  EXPECT_TRUE(none["mean"].is_null());
  // The record still serializes: JSON has no NaN.
  EXPECT_NO_THROW(compress({Compressor::kNone}, t).dump());
  EXPECT_TRUE(compress({Compressor::kNone}, t)["values"][1].is_null());
}

TEST(Compressor, TilesEqualAdaptivePoolingWhereTheGridDividesTheMatrix) {
  at::manual_seed(2);
  const at::Tensor t = at::randn({2, 32, 48}, at::kDouble);  // rows 64, columns 48
  CompressorSpec spec{Compressor::kTile};
  spec.grid_rows = 16;
  spec.grid_cols = 12;
  const json j = compress(spec, t);
  EXPECT_EQ(j["rows"], 64);
  EXPECT_EQ(j["cols"], 48);
  EXPECT_EQ(j["grid"], json({16, 12}));
  const at::Tensor m = t.reshape({1, 64, 48});
  const at::Tensor mean = at::adaptive_avg_pool2d(m, {16, 12}).reshape({-1});
  const at::Tensor max = std::get<0>(at::adaptive_max_pool2d(m, {16, 12})).reshape({-1});
  const std::vector<double> got_mean = doubles(j["mean"]), got_max = doubles(j["max"]);
  ASSERT_EQ(got_mean.size(), 192u);
  for (size_t i = 0; i < got_mean.size(); ++i) {
    EXPECT_NEAR(got_mean[i], mean[i].item<double>(), 1e-14);
    EXPECT_DOUBLE_EQ(got_max[i], max[i].item<double>());
  }
}

TEST(Compressor, TilesOfAnUnevenMatrixCoverEveryEntryOnceAndAGridLargerThanItShrinks) {
  const at::Tensor t = at::arange(7 * 5, at::kDouble).reshape({7, 5});
  CompressorSpec spec{Compressor::kTile};
  spec.grid_rows = 3;
  spec.grid_cols = 9;  // more columns than the matrix has
  const json j = compress(spec, t);
  EXPECT_EQ(j["grid"], json({3, 5}));
  // Rows 0-1, 2-3, 4-6 (edges i·7/3): the means of column c are those rows' means.
  const std::vector<double> mean = doubles(j["mean"]);
  const std::vector<std::pair<int, int>> bands = {{0, 2}, {2, 4}, {4, 7}};
  for (int i = 0; i < 3; ++i) {
    for (int c = 0; c < 5; ++c) {
      double sum = 0;
      for (int r = bands[i].first; r < bands[i].second; ++r) sum += r * 5 + c;
      EXPECT_DOUBLE_EQ(mean[i * 5 + c], sum / (bands[i].second - bands[i].first));
    }
  }
}

TEST(Compressor, TopGivesBothEndsInOrderAndCapsKAtTheSize) {
  const at::Tensor t = at::tensor({0.5, -2.0, 3.0, 1.0, -0.25}, at::kDouble);
  CompressorSpec spec{Compressor::kTop};
  spec.k = 2;
  const json j = compress(spec, t);
  EXPECT_EQ(j["largest"]["index"], json({2, 3}));
  EXPECT_EQ(j["largest"]["value"], json({3.0, 1.0}));
  EXPECT_EQ(j["smallest"]["index"], json({1, 4}));
  spec.k = 50;
  EXPECT_EQ(compress(spec, t)["largest"]["index"].size(), 5u);
}

TEST(Compressor, NoneCapsItsValuesAndSaysSo) {
  CompressorSpec spec{Compressor::kNone};
  spec.max_elements = 3;
  const json j = compress(spec, at::arange(10, at::kDouble).reshape({2, 5}));
  EXPECT_EQ(j["values"], json({0.0, 1.0, 2.0}));
  EXPECT_TRUE(j["truncated"].get<bool>());
  EXPECT_FALSE(compress({Compressor::kNone}, at::ones({2})).at("truncated").get<bool>());
}

TEST(Compressor, ProjectionIsTheRowsDotTheUnitVectorOfTheLayer) {
  at::manual_seed(3);
  const at::Tensor x = at::randn({2, 3, 4}, at::kDouble);
  const at::Tensor v = at::tensor({1.0, 2.0, 0.0, -2.0}, at::kDouble);  // norm 3
  const ProjectionVectors vectors({{"blocks.1", v}});
  const json j = compress({Compressor::kProjection}, x, "blocks.1", &vectors);
  const at::Tensor expected = (x * v).sum(-1).reshape({-1}) / 3.0;
  const std::vector<double> got = doubles(j["values"]);
  ASSERT_EQ(got.size(), 6u);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i].item<double>(), 1e-15);
  EXPECT_NEAR(j["mean"].get<double>(), expected.mean().item<double>(), 1e-15);
  EXPECT_EQ(j["vector"], "blocks.1");
  // No vector for the layer, or one of the wrong length: a note, never a throw.
  EXPECT_EQ(compress({Compressor::kProjection}, x, "blocks.0", &vectors)["note"], "no vector");
  EXPECT_TRUE(compress({Compressor::kProjection}, at::ones({2, 5}), "blocks.1", &vectors).contains("note"));
  EXPECT_EQ(compress({Compressor::kEmpty}, x), json::object());
}

TEST(Compressor, CompressingChangesNeitherTheTensorNorItsGraph) {
  const at::Tensor w = at::randn({4, 4}, at::kDouble).requires_grad_(true);
  const at::Tensor y = w * 2;
  const at::Tensor before = y.detach().clone();
  for (const Compressor c : {Compressor::kNone, Compressor::kStats, Compressor::kTile, Compressor::kTop}) {
    compress({c}, y);
  }
  EXPECT_TRUE(at::equal(y.detach(), before));
  y.sum().backward();
  EXPECT_TRUE(at::equal(w.grad(), at::full({4, 4}, 2.0, at::kDouble)));
}

}  // namespace
}  // namespace magic
