// gradcheck and gradgradcheck: pass on correct derivatives (the LM loss included), fail with a
// message naming the output, the input and the size of the error on planted wrong ones.
#include <gtest/gtest.h>

#include <torch/csrc/autograd/custom_function.h>

#include "checks/gradcheck.h"
#include "lib/core/seed.h"
#include "lib/model/gpt.h"
#include "lib/model/lm_loss.h"

namespace magic {
namespace {

using checks::GradcheckOptions;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// sin with a backward that is 10% too large: first derivatives are wrong.
struct WrongSin : public torch::autograd::Function<WrongSin> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x) {
    ctx->save_for_backward({x});
    return x.sin();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {grad[0] * ctx->get_saved_variables()[0].cos() * 1.1};
  }
};

// x³ with a correct first derivative whose graph is cut (computed from a detached x): the
// second derivative is lost, the failure mode of a collective whose backward is not itself
// differentiable.
struct DetachedCube : public torch::autograd::Function<DetachedCube> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x) {
    ctx->save_for_backward({x});
    return x * x * x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    at::Tensor x = ctx->get_saved_variables()[0].detach();
    return {grad[0] * 3.0 * x * x};
  }
};

at::Tensor random_input(std::vector<int64_t> shape, uint64_t seed) {
  auto gen = make_generator(seed);
  return at::randn(shape, gen, at::TensorOptions().dtype(at::kDouble)).requires_grad_(true);
}

TEST(Gradcheck, PassesOnCorrectDerivativesInSlowAndFastMode) {
  auto fn = [](const std::vector<at::Tensor>& x) {
    return std::vector<at::Tensor>{(x[0].sin() * x[1]).sum(0), x[0].exp().matmul(x[1].t())};
  };
  std::vector<at::Tensor> inputs{random_input({3, 4}, 1), random_input({3, 4}, 2)};
  for (bool fast : {false, true}) {
    GradcheckOptions opt;
    opt.fast_mode = fast;
    auto result = checks::gradcheck(fn, inputs, opt);
    EXPECT_TRUE(result.passed) << result.message;
    EXPECT_GT(result.compared, 0);
    EXPECT_LT(result.max_abs_error, 1e-7);
  }
}

TEST(Gradcheck, FailsOnAWrongBackwardAndSaysWhere) {
  auto fn = [](const std::vector<at::Tensor>& x) { return std::vector<at::Tensor>{x[0].exp(), WrongSin::apply(x[1])}; };
  std::vector<at::Tensor> inputs{random_input({5}, 3), random_input({5}, 4)};
  for (bool fast : {false, true}) {
    GradcheckOptions opt;
    opt.fast_mode = fast;
    auto result = checks::gradcheck(fn, inputs, opt);
    EXPECT_FALSE(result.passed);
    EXPECT_NE(result.message.find("output 1 with respect to input 1"), std::string::npos) << result.message;
    EXPECT_NE(result.message.find("analytical"), std::string::npos) << result.message;
  }
}

TEST(Gradgradcheck, PassesOnCorrectSecondDerivatives) {
  auto fn = [](const std::vector<at::Tensor>& x) { return std::vector<at::Tensor>{(x[0] * x[0] * x[0]).sin()}; };
  auto result = checks::gradgradcheck(fn, {random_input({4}, 5)});
  EXPECT_TRUE(result.passed) << result.message;
}

TEST(Gradgradcheck, FailsWhenTheBackwardIsNotDifferentiable) {
  auto fn = [](const std::vector<at::Tensor>& x) { return std::vector<at::Tensor>{DetachedCube::apply(x[0])}; };
  std::vector<at::Tensor> inputs{random_input({4}, 6)};
  EXPECT_TRUE(checks::gradcheck(fn, inputs).passed) << "first derivatives are right";
  auto result = checks::gradgradcheck(fn, inputs);
  EXPECT_FALSE(result.passed);
  EXPECT_NE(result.message.find("second derivative"), std::string::npos) << result.message;
}

// The LM loss as a function of a few parameter tensors (the rest held fixed).
struct LmLossFixture {
  GptConfig config{257, 8, 1, 2, 6};
  TensorTree params = gpt_init(config, at::kDouble, 7);
  at::Tensor ids = at::tensor({72, 101, 108, 108, 111, 32, 87, 111, 114, 108, 100, 256}, at::kLong).view({2, 6});
  at::Tensor labels = ids.clone();
  at::Tensor weights = at::tensor({0.7, 1.3}, at::kDouble);
  double label_smoothing = 0.0;

  checks::TensorFunction loss_of(const std::vector<std::string>& names) const {
    return [this, names](const std::vector<at::Tensor>& x) {
      TensorTree p = params;
      for (size_t i = 0; i < names.size(); ++i) p.set(names[i], x[i]);
      at::Tensor losses =
          next_token_losses(gpt_forward(config, p, ids), labels, TokenLoss{config.vocab, label_smoothing});
      at::Tensor mask = label_mask(labels, at::kDouble);
      return std::vector<at::Tensor>{
          reduce_weighted_loss(losses, mask, weights, Reduction::kMean, mask.sum().item<double>())};
    };
  }
};

TEST(Gradcheck, LmLossFirstAndSecondDerivatives) {
  LmLossFixture f;
  std::vector<std::string> names{"blocks.0.attn.qkv.weight", "blocks.0.ln1.weight", "blocks.0.mlp.fc.bias"};
  std::vector<at::Tensor> inputs;
  for (const auto& n : names) inputs.push_back(f.params.at(n).detach().clone().requires_grad_(true));
  auto first = checks::gradcheck(f.loss_of(names), inputs);
  EXPECT_TRUE(first.passed) << first.message;
  GradcheckOptions fast;
  fast.fast_mode = true;
  auto second = checks::gradgradcheck(f.loss_of(names), inputs, fast);
  EXPECT_TRUE(second.passed) << second.message;
  auto second_slow = checks::gradgradcheck(f.loss_of({"blocks.0.ln1.weight"}), {inputs[1]});
  EXPECT_TRUE(second_slow.passed) << second_slow.message;
}

// The same with label smoothing, whose mean over the vocabulary reaches every logit of a position.
TEST(Gradcheck, LabelSmoothedLmLossFirstAndSecondDerivatives) {
  LmLossFixture f;
  f.label_smoothing = 0.1;
  f.labels[1][3] = kIgnoreLabel;
  std::vector<std::string> names{"head.weight", "blocks.0.ln1.weight"};
  std::vector<at::Tensor> inputs;
  for (const auto& n : names) inputs.push_back(f.params.at(n).detach().clone().requires_grad_(true));
  GradcheckOptions fast;
  fast.fast_mode = true;
  auto first = checks::gradcheck(f.loss_of(names), inputs, fast);
  EXPECT_TRUE(first.passed) << first.message;
  auto second = checks::gradgradcheck(f.loss_of(names), inputs, fast);
  EXPECT_TRUE(second.passed) << second.message;
  auto second_slow = checks::gradgradcheck(f.loss_of({"blocks.0.ln1.weight"}), {inputs[1]});
  EXPECT_TRUE(second_slow.passed) << second_slow.message;
}

TEST(Gradcheck, LmLossWithAPlantedWrongGradientFails) {
  LmLossFixture f;
  auto correct = f.loss_of({"head.weight"});
  // The loss plus a term whose backward is wrong: a bug hidden inside an otherwise correct model.
  checks::TensorFunction wrong = [correct](const std::vector<at::Tensor>& x) {
    return std::vector<at::Tensor>{correct(x)[0] + WrongSin::apply(x[0].narrow(0, 0, 1)).sum()};
  };
  std::vector<at::Tensor> inputs{f.params.at("head.weight").detach().clone().requires_grad_(true)};
  GradcheckOptions fast;
  fast.fast_mode = true;
  auto result = checks::gradcheck(wrong, inputs, fast);
  EXPECT_FALSE(result.passed);
  EXPECT_NE(result.message.find("output 0 with respect to input 0"), std::string::npos) << result.message;
}

}  // namespace
}  // namespace magic
