#include <gtest/gtest.h>

#include "lib/core/error.h"
#include "lib/model/gpt.h"

namespace magic {
namespace {

GptConfig small() {
  return GptConfig{257, 16, 2, 4, 12};
}

at::Tensor tokens(int64_t B, int64_t T, uint64_t seed) {
  at::manual_seed(seed);
  return at::randint(0, 257, {B, T}, at::kLong);
}

TEST(Gpt, ShapesAndParameterNames) {
  auto p = gpt_init(small(), at::kDouble, 0);
  EXPECT_TRUE(p.contains("blocks.1.attn.qkv.weight"));
  EXPECT_EQ(p.at("blocks.0.mlp.fc.weight").sizes(), (std::vector<int64_t>{64, 16}));
  EXPECT_EQ(p.at("head.weight").sizes(), (std::vector<int64_t>{257, 16}));
  EXPECT_EQ(gpt_forward(small(), p, tokens(3, 12, 1)).sizes(), (std::vector<int64_t>{3, 12, 257}));
  EXPECT_EQ(p.at("tok_emb").scalar_type(), at::kDouble);
}

TEST(Gpt, InitIsAPureFunctionOfTheSeed) {
  auto a = gpt_init(small(), at::kDouble, 5), b = gpt_init(small(), at::kDouble, 5),
       c = gpt_init(small(), at::kDouble, 6);
  EXPECT_TRUE(at::equal(a.flatten(), b.flatten()));
  EXPECT_FALSE(at::equal(a.flatten(), c.flatten()));
}

TEST(Gpt, IsCausalAFutureTokenNeverChangesAnEarlierLogit) {
  auto p = gpt_init(small(), at::kDouble, 2);
  at::Tensor x = tokens(2, 10, 3);
  at::Tensor y = x.clone();
  y.select(1, 7).fill_(42);
  at::Tensor lx = gpt_forward(small(), p, x), ly = gpt_forward(small(), p, y);
  EXPECT_TRUE(at::equal(lx.narrow(1, 0, 7), ly.narrow(1, 0, 7)));
  EXPECT_FALSE(at::allclose(lx.narrow(1, 7, 3), ly.narrow(1, 7, 3)));
}

TEST(Gpt, ConfigValidationNamesTheField) {
  nlohmann::json j = {{"d_model", 10}, {"n_heads", 3}};
  try {
    GptConfig::from_json(JsonFields(j, "model.json", "model"));
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("divisible by n_heads 3"), std::string::npos) << e.what();
  }
  nlohmann::json short_len = {{"max_len", 1}};
  EXPECT_THROW(GptConfig::from_json(JsonFields(short_len, "m.json", "model")), InputError);
  nlohmann::json typo = {{"d_modle", 8}};
  EXPECT_THROW(GptConfig::from_json(JsonFields(typo, "m.json", "model")), InputError);
}

}  // namespace
}  // namespace magic
