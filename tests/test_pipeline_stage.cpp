// Pipeline chunks of the GPT (lib/model/pipeline_stage.h) against the whole model:
//   - the split: pp·vpp equal chunks in Megatron's interleaved order, worked out by hand;
//   - bad splits refused by name: more stages than layers, layers that do not divide, vpp < 1;
//   - the chunks run one after another, each on its own parameters only, give the whole model's
//     logits exactly, and the gradients and a Hessian-vector product through the chain of chunks
//     (each chunk's input a fresh leaf, its cotangent handed back as a send's backward would) equal
//     the whole model's: with a tied head the token embedding's two copies add up to its gradient.
#include <gtest/gtest.h>

#include <torch/csrc/autograd/autograd.h>

#include "lib/core/error.h"
#include "lib/core/seed.h"
#include "lib/model/gpt.h"
#include "tests/support.h"

namespace magic {
namespace {

std::vector<std::pair<int64_t, int64_t>> ranges(const std::vector<PipelineStage>& chunks) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const auto& c : chunks) out.emplace_back(c.begin_layer, c.end_layer);
  return out;
}

using Ranges = std::vector<std::pair<int64_t, int64_t>>;

// 8 layers, pp = 2, vpp = 2: chunks of 2 layers; chunk c = v·2 + s, so stage 0 holds chunks 0 and 2
// (layers 0-1, 4-5), stage 1 chunks 1 and 3 (layers 2-3, 6-7); chunk 0 embeds, chunk 3 heads.
TEST(PipelineChunks, InterleavedChunksGoRoundTheStagesInTurn) {
  const auto s0 = pipeline_chunks(8, 2, 2, 0, "topology");
  const auto s1 = pipeline_chunks(8, 2, 2, 1, "topology");
  EXPECT_EQ(ranges(s0), (Ranges{{0, 2}, {4, 6}}));
  EXPECT_EQ(ranges(s1), (Ranges{{2, 4}, {6, 8}}));
  EXPECT_TRUE(s0[0].embeds);
  EXPECT_FALSE(s0[0].heads || s0[1].embeds || s0[1].heads || s1[0].embeds || s1[0].heads || s1[1].embeds);
  EXPECT_TRUE(s1[1].heads);
  // Without virtual stages: contiguous ranges, 4 layers over 4 stages one each.
  EXPECT_EQ(ranges(pipeline_chunks(4, 4, 1, 2, "topology")), (Ranges{{2, 3}}));
  const auto one = pipeline_chunks(3, 1, 1, 0, "topology");
  EXPECT_TRUE(one[0].embeds && one[0].heads);
  EXPECT_EQ(ranges(one), (Ranges{{0, 3}}));
}

TEST(PipelineChunks, SplitsThatCannotBeMadeAreRefusedByName) {
  auto refusal = [](int64_t layers, int64_t pp, int64_t vpp, const std::string& what) {
    return testing::input_error_of([&] { pipeline_chunks(layers, pp, vpp, 0, what); });
  };
  EXPECT_EQ(refusal(2, 4, 1, "--topology pp=4"),
            "--topology pp=4: pp=4 is more stages than the model's 2 layers (each stage holds at least one)");
  EXPECT_EQ(refusal(6, 4, 1, "--topology pp=4"),
            "--topology pp=4: the model's 6 layers do not split into pp·vpp = 4·1 = 4 chunks of equal length");
  EXPECT_EQ(refusal(4, 2, 3, "run.json: topology"),
            "run.json: topology: the model's 4 layers do not split into pp·vpp = 2·3 = 6 chunks of equal length");
  EXPECT_EQ(refusal(4, 2, 0, "x"), "x: vpp=0: expected an integer >= 1");
  EXPECT_EQ(refusal(4, 0, 1, "x"), "x: pp=0: expected an integer >= 1");
}

struct Derivatives {
  at::Tensor logits;
  TensorTree grad, hvp;
  at::Tensor tied_copy_grad;  // the last chunk's tok_emb gradient, with a tied head
};

// Faults planted in the chain, each of which a comparison below must see.
enum class Plant { kNone, kDetachedSend };

GptConfig small_model(bool tied) {
  GptConfig c;
  c.vocab = 13;
  c.d_model = 8;
  c.n_layers = 4;
  c.n_heads = 2;
  c.max_len = 6;
  c.tied_head = tied;
  return c;
}

// loss = Σ logits ⊙ w (a fixed random cotangent), its gradient, and the HVP with `v`.
Derivatives whole(const GptConfig& c, const TensorTree& params, const at::Tensor& ids, const at::Tensor& w,
                  const TensorTree& v) {
  TensorTree p = params.requires_grad();
  Derivatives d;
  d.logits = gpt_forward(c, p, ids);
  const at::Tensor loss = (d.logits * w).sum();
  const auto leaves = p.tensors();
  d.grad = with_values(p, torch::autograd::grad({loss}, leaves, {}, true, true));
  d.hvp = with_values(p, torch::autograd::grad({dot(d.grad, v)}, leaves));
  d.grad = d.grad.detach();
  return d;
}

// The same through the chunks in order, each on its own parameters (gpt_stage_parameters: a tied
// head's last chunk holds a copy of tok_emb); the backward goes chunk by chunk from the last, each
// a VJP of the cotangent at its output that hands its input's cotangent to the chunk before, as a
// send's backward does. Graphs are kept across the hand-overs (what a twice-differentiable
// send/receive pair provides), so the HVP runs through the same chain.
Derivatives chunked(const GptConfig& c, const TensorTree& params, const at::Tensor& ids, const at::Tensor& w,
                    const TensorTree& v, int64_t pp, int64_t vpp, Plant plant = Plant::kNone) {
  std::vector<PipelineStage> order(static_cast<size_t>(pp * vpp));
  for (int64_t s = 0; s < pp; ++s) {
    const auto mine = pipeline_chunks(c.n_layers, pp, vpp, s, "test");
    for (int64_t k = 0; k < vpp; ++k) order[static_cast<size_t>(k * pp + s)] = mine[static_cast<size_t>(k)];
  }
  std::vector<TensorTree> own;
  std::vector<at::Tensor> inputs, outputs;
  at::Tensor x = ids;
  for (const PipelineStage& stage : order) {
    own.push_back(gpt_stage_parameters(c, {stage}, params).requires_grad());
    ModelLayout layout = ModelLayout::whole(ids.size(1));
    layout.stage = stage;
    inputs.push_back(x);
    x = gpt_forward(c, own.back(), x, layout);
    outputs.push_back(x);
  }
  Derivatives d;
  d.logits = x;
  // First order: each chunk's VJP of the cotangent arriving at its output.
  std::vector<TensorTree> grads(order.size());
  at::Tensor cotangent = w;
  for (size_t i = order.size(); i-- > 0;) {
    std::vector<at::Tensor> wrt = own[i].tensors();
    if (!order[i].embeds) wrt.push_back(inputs[i]);
    auto g = torch::autograd::grad({outputs[i]}, wrt, {cotangent}, true, true);
    grads[i] = with_values(own[i], g);
    if (!order[i].embeds) cotangent = plant == Plant::kDetachedSend ? g.back().detach() : g.back();
    if (order[i].heads && c.tied_head) d.tied_copy_grad = grads[i].at("tok_emb").detach();
  }
  // Second order: d/dθ of Σ_i ⟨grad_i, v_i⟩, where grad_i depends on every chunk's parameters
  // through the inputs handed up and the cotangents handed down.
  at::Tensor gv = at::zeros({}, at::kDouble);
  std::vector<at::Tensor> all;
  for (size_t i = 0; i < order.size(); ++i) {
    gv = gv + dot(grads[i], gpt_stage_parameters(c, {order[i]}, v));
    for (const auto& t : own[i].tensors()) all.push_back(t);
  }
  const auto h = torch::autograd::grad({gv}, all, {}, c10::nullopt, false, true);
  // Each parameter's derivatives summed over the chunks that hold a copy of it.
  d.grad = params.zeros_like();
  d.hvp = params.zeros_like();
  size_t offset = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const TensorTree hi = with_values(own[i], h, offset);
    offset += own[i].size();
    for (const auto& e : grads[i]) d.grad.at(e.name) = d.grad.at(e.name) + e.tensor.detach();
    for (const auto& e : hi) d.hvp.at(e.name) = d.hvp.at(e.name) + e.tensor;
  }
  return d;
}

// A model, its parameters, a batch, the cotangent w of its logits and an HVP direction v.
struct ChunkProblem {
  GptConfig config;
  TensorTree params, v;
  at::Tensor ids, w;
};

ChunkProblem problem(bool tied, int64_t rows, uint64_t seed) {
  ChunkProblem s{small_model(tied), {}, {}, {}, {}};
  s.params = gpt_init(s.config, at::kDouble, 7);
  at::Generator gen = make_generator(seed);
  s.ids = at::randint(0, s.config.vocab, {rows, 5}, gen, at::kLong);
  s.w = at::randn({rows, 5, s.config.vocab}, gen, at::kDouble);
  s.v = s.params.map([&](const at::Tensor& t) { return at::randn(t.sizes(), gen, at::kDouble); });
  return s;
}

class ChunkedGpt : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, bool>> {};

TEST_P(ChunkedGpt, ChunksInOrderGiveTheWholeModelsLogitsGradientAndHvp) {
  const auto [pp, vpp, tied] = GetParam();
  const ChunkProblem s = problem(tied, 3, 11);
  const Derivatives a = whole(s.config, s.params, s.ids, s.w, s.v);
  const Derivatives b = chunked(s.config, s.params, s.ids, s.w, s.v, pp, vpp);
  EXPECT_TRUE(at::equal(a.logits, b.logits));
  for (const auto& e : a.grad) {
    EXPECT_TRUE(at::allclose(e.tensor, b.grad.at(e.name), 1e-12, 1e-14)) << e.name;
    EXPECT_TRUE(at::allclose(a.hvp.at(e.name), b.hvp.at(e.name), 1e-11, 1e-13)) << e.name;
  }
  // Planted: the last chunk's copy of the tied embedding left out of the sum fails the comparison.
  if (tied) {
    ASSERT_TRUE(b.tied_copy_grad.defined());
    EXPECT_GT(b.tied_copy_grad.abs().max().item<double>(), 1e-6);
    EXPECT_FALSE(at::allclose(a.grad.at("tok_emb"), b.grad.at("tok_emb") - b.tied_copy_grad, 1e-6, 1e-8));
  }
}

// Planted: the cotangent a chunk hands to the one before detached (a send whose backward is not
// differentiable again). First order cannot see it; the HVP of an early chunk's parameters can.
TEST(ChunkedGptPlanted, ADetachedSendKeepsTheGradientAndBreaksTheHvp) {
  const ChunkProblem s = problem(false, 2, 12);
  const Derivatives a = whole(s.config, s.params, s.ids, s.w, s.v);
  const Derivatives b = chunked(s.config, s.params, s.ids, s.w, s.v, 2, 1, Plant::kDetachedSend);
  for (const auto& e : a.grad) EXPECT_TRUE(at::allclose(e.tensor, b.grad.at(e.name), 1e-12, 1e-14)) << e.name;
  EXPECT_FALSE(at::allclose(a.hvp.at("blocks.0.mlp.fc.weight"), b.hvp.at("blocks.0.mlp.fc.weight"), 1e-6, 1e-8));
}

INSTANTIATE_TEST_SUITE_P(Splits, ChunkedGpt,
                         ::testing::Values(std::make_tuple(2, 1, false), std::make_tuple(4, 1, true),
                                           std::make_tuple(2, 2, true)));

// Each block's parameters belong to exactly one chunk; the embeddings to the first; the final
// LayerNorm and head to the last; with a tied head tok_emb to the first and the last.
TEST(ChunkedGptParameters, EveryParameterHasItsChunksAndATiedEmbeddingTwo) {
  const GptConfig c = small_model(true);
  const TensorTree params = gpt_init(c, at::kDouble, 1);
  std::vector<PipelineStage> all;
  for (int64_t s = 0; s < 2; ++s) {
    for (const auto& chunk : pipeline_chunks(c.n_layers, 2, 2, s, "test")) all.push_back(chunk);
  }
  for (const auto& e : params) {
    int holders = 0;
    for (const auto& chunk : all) holders += gpt_stage_uses(c, chunk, e.name) ? 1 : 0;
    EXPECT_EQ(holders, e.name == "tok_emb" ? 2 : 1) << e.name;
  }
  EXPECT_EQ(gpt_stage_parameters(c, all, params).names(), params.names());
}

}  // namespace
}  // namespace magic
