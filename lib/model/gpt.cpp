#include "lib/model/gpt.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "lib/core/error.h"
#include "lib/core/seed.h"
#include "lib/core/strings.h"
#include "lib/model/kernel_fallback.h"
#include "lib/trace/trace_context.h"
#include "lib/trace/trace_sink.h"

namespace magic {
namespace {

std::string block(int64_t layer, const char* name) {
  return str_cat("blocks.", layer, ".", name);
}

at::Tensor layer_norm(const GptConfig& c, const at::Tensor& x, const TensorTree& p, const std::string& prefix) {
  return kernels::layer_norm(x, p.at(prefix + ".weight"), p.at(prefix + ".bias"), c.layer_norm_eps);
}

// GPT-NeoX's rotary embedding of t [B, H, T, D] at the global positions [T] (a context-parallel
// rank's own columns: the angles are those of the whole sequence). The angles are formed in fp64
// and rounded to t's dtype.
at::Tensor rotate(const GptConfig& c, const at::Tensor& t, const at::Tensor& positions) {
  const int64_t r = c.rotary_dims, half = r / 2;
  const auto f64 = positions.options().dtype(at::kDouble);
  const at::Tensor inv_freq = at::pow(c.rotary_base, -at::arange(0, r, 2, f64) / static_cast<double>(r));
  const at::Tensor angles = at::outer(positions.to(at::kDouble), inv_freq);  // [T, r/2]
  const at::Tensor emb = at::cat({angles, angles}, -1);                      // [T, r]
  const at::Tensor cos = emb.cos().to(t.scalar_type()), sin = emb.sin().to(t.scalar_type());
  const at::Tensor turned = t.narrow(-1, 0, r), kept = t.narrow(-1, r, t.size(-1) - r);
  const at::Tensor rotated_half = at::cat({-turned.narrow(-1, half, half), turned.narrow(-1, 0, half)}, -1);
  return at::cat({turned * cos + rotated_half * sin, kept}, -1);
}

// softmax(scores + causal mask) · v for queries at `positions` and keys at `key_positions`.
at::Tensor attend_masked(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& positions,
                         const at::Tensor& key_positions, at::Tensor* probabilities) {
  // The causal mask is added (-inf where key j comes after query i in the true order, else 0)
  // rather than filled in: the same values, and REPLAY's double backward then has two fewer T x T
  // passes per layer.
  at::Tensor scores = kernels::matmul(q, k.transpose(-2, -1));
  const at::Tensor future = key_positions.unsqueeze(0) > positions.unsqueeze(1);
  scores = scores + at::where(future, -std::numeric_limits<double>::infinity(), 0.0).to(scores.scalar_type());
  at::Tensor p = kernels::softmax(scores, -1);
  if (probabilities) *probabilities = p;
  return kernels::matmul(p, v);
}

// Causal attention when the keys are the queries' own T columns in order (keys_in_order): query
// block [b, e) reads keys [0, e) only, so of the T x T scores n blocks compute (n + 1)/2n; the keys
// after e would add only exp(-inf) = 0 to a row. q is scaled already; [B, H, T, D] each.
at::Tensor attend_in_blocks(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const SequenceLayout& layout,
                            const std::string& layer) {
  const int64_t T = q.size(2), rows = (T + causal_blocks(T) - 1) / causal_blocks(T);
  std::vector<at::Tensor> ys, probabilities;
  for (int64_t begin = 0; begin < T; begin += rows) {
    const int64_t end = std::min(T, begin + rows);
    at::Tensor p;
    ys.push_back(attend_masked(q.narrow(2, begin, end - begin), k.narrow(2, 0, end), v.narrow(2, 0, end),
                               layout.positions.narrow(0, begin, end - begin), layout.key_positions.narrow(0, 0, end),
                               tracing() ? &p : nullptr));
    if (tracing()) probabilities.push_back(at::constant_pad_nd(p.detach(), {0, T - end}));
  }
  if (tracing()) trace_attention(at::cat(probabilities, 2), layer);
  return ys.size() == 1 ? ys[0] : at::cat(ys, 2);
}

at::Tensor causal_self_attention(const GptConfig& c, const at::Tensor& normed, const TensorTree& p, int64_t layer,
                                 const ModelLayout& model_layout) {
  const SequenceLayout& layout = model_layout.sequence;
  const TensorParallel& tensor = *model_layout.tensor;
  at::Tensor qkv =
      tensor.column_linear(normed, p.at(block(layer, "attn.qkv.weight")), p.at(block(layer, "attn.qkv.bias")));
  // This rank's heads: n_heads / tp of them, each of the full head dimension.
  const int64_t B = qkv.size(0), T = qkv.size(1), H = c.n_heads / tensor.size(), D = c.d_model / c.n_heads;
  auto heads = [&](const at::Tensor& t) { return t.view({B, T, H, D}).transpose(1, 2); };
  auto parts = qkv.split(H * D, -1);
  at::Tensor q = heads(parts[0]), k = heads(parts[1]);
  if (c.positions == Positions::kRotary) {
    q = rotate(c, q, layout.position_ids);
    k = rotate(c, k, layout.position_ids);
  }
  // The scale goes on q (T x D per head) rather than on the T x T scores.
  const at::Tensor scaled = q * attention_scale_of(c), v = heads(parts[2]);
  const std::string name = str_cat("blocks.", layer);
  at::Tensor y;
  if (layout.attend) {  // ring attention: no probabilities to trace, the keys never gathered
    y = layout.attend(scaled, k, v);
  } else if (layout.keys_in_order) {
    y = attend_in_blocks(scaled, k, v, layout, name);
  } else {
    at::Tensor probabilities;
    y = attend_masked(scaled, layout.gather_keys(k), layout.gather_keys(v), layout.positions, layout.key_positions,
                      tracing() ? &probabilities : nullptr);
    if (tracing()) trace_attention(probabilities, name);
  }
  return tensor.row_linear(y.transpose(1, 2).reshape({B, T, H * D}), p.at(block(layer, "attn.proj.weight")),
                           p.at(block(layer, "attn.proj.bias")));
}

at::Tensor mlp(const GptConfig& c, const at::Tensor& x, const TensorTree& p, int64_t layer,
               const TensorParallel& tensor) {
  const at::Tensor pre =
      tensor.column_linear(x, p.at(block(layer, "mlp.fc.weight")), p.at(block(layer, "mlp.fc.bias")));
  const at::Tensor h = c.activation == Activation::kGeluTanh ? kernels::gelu_tanh(pre) : kernels::gelu(pre);
  return tensor.row_linear(h, p.at(block(layer, "mlp.proj.weight")), p.at(block(layer, "mlp.proj.bias")));
}

// The token embeddings of input_ids [B, T]. On tp ranks each holds a vocabulary shard of the
// table: a token outside it embeds as 0 there, and the sum over tp is the lookup.
at::Tensor embed_tokens(const GptConfig& c, const at::Tensor& table, const at::Tensor& ids,
                        const TensorParallel& tensor) {
  const int64_t B = ids.size(0), T = ids.size(1);
  // index_select (adjoint index_add) is differentiable to any order, as REPLAY needs.
  if (tensor.size() == 1) return table.index_select(0, ids.reshape({-1})).view({B, T, c.d_model});
  const VocabShard shard = vocab_shard(c.vocab, tensor.size(), tensor.index());
  const at::Tensor here = ids.ge(shard.begin) & ids.lt(shard.begin + shard.real);
  const at::Tensor rows = at::where(here, ids - shard.begin, at::zeros({}, ids.options()));
  const at::Tensor found = table.index_select(0, rows.reshape({-1})).view({B, T, c.d_model});
  return tensor.leave_row(at::where(here.unsqueeze(-1), found, at::zeros({}, found.options())), 1);
}

// The blocks of layout.stage from the residual stream x, then the final LayerNorm and the head
// when the chunk is the last.
at::Tensor run_layers(const GptConfig& c, const TensorTree& p, at::Tensor x, const ModelLayout& layout) {
  const TensorParallel& tensor = *layout.tensor;
  const PipelineStage& stage = layout.stage;
  for (int64_t l = stage.begin_layer; l < stage.end(c.n_layers); ++l) {
    if (c.parallel_residual) {
      x = x + causal_self_attention(c, layer_norm(c, x, p, block(l, "ln1")), p, l, layout) +
          mlp(c, layer_norm(c, x, p, block(l, "ln2")), p, l, tensor);
    } else {
      x = x + causal_self_attention(c, layer_norm(c, x, p, block(l, "ln1")), p, l, layout);
      x = x + mlp(c, layer_norm(c, x, p, block(l, "ln2")), p, l, tensor);
    }
    if (tracing()) trace_activation(x, str_cat("blocks.", l), "activation", str_cat("blocks.", l));
  }
  if (!stage.heads) return x;
  x = layer_norm(c, x, p, "ln_f");
  return kernels::matmul(tensor.enter_column(x, 1), p.at(c.tied_head ? "tok_emb" : "head.weight").t());
}

}  // namespace

GptConfig GptConfig::from_json(const JsonFields& f) {
  GptConfig c;
  c.vocab = f.integer("vocab", c.vocab);
  c.d_model = f.integer("d_model", c.d_model);
  c.n_layers = f.integer("n_layers", c.n_layers);
  c.n_heads = f.integer("n_heads", c.n_heads);
  c.max_len = f.integer("max_len", c.max_len);
  f.finish();
  // Each value is checked where it was read, so that its message names the input that gave it;
  // validate() then checks the rules between keys, naming the object.
  for (const char* key : {"vocab", "d_model", "n_layers", "n_heads"}) {
    if (f.has(key) && f.integer(key) < 1) f.fail(key, str_cat("expected an integer >= 1, got ", f.integer(key)));
  }
  if (c.max_len < 2) {
    f.fail("max_len", str_cat("expected >= 2 (a sequence needs a token and its next), got ", c.max_len));
  }
  c.validate(f.where());
  return c;
}

int64_t causal_blocks(int64_t columns) {
  // Each block is one more set of kernel calls: 32 rows or more, at most four.
  return std::clamp<int64_t>(columns / 32, 1, 4);
}

double attention_scale_of(const GptConfig& c) {
  const double head_dim = static_cast<double>(c.d_model / c.n_heads);
  return c.attention_scale == 0.0 ? 1.0 / std::sqrt(head_dim) : c.attention_scale;
}

void GptConfig::validate(const std::string& where) const {
  auto positive = [&](const char* name, int64_t v) {
    if (v < 1) throw InputError(str_cat(where, ".", name, ": expected an integer >= 1, got ", v));
  };
  positive("vocab", vocab);
  positive("d_model", d_model);
  positive("n_layers", n_layers);
  positive("n_heads", n_heads);
  if (max_len < 2) {
    throw InputError(str_cat(where, ".max_len: expected >= 2 (a sequence needs a token and its next), got ", max_len));
  }
  if (!(std::isfinite(attention_scale) && attention_scale >= 0.0)) {
    throw InputError(
        str_cat(where, ".attention_scale: expected a finite number >= 0 (0: 1/sqrt(head_dim)), got ", attention_scale));
  }
  if (d_model % n_heads != 0) {
    throw InputError(str_cat(where, ": d_model ", d_model, " must be divisible by n_heads ", n_heads));
  }
  if (positions == Positions::kRotary) {
    const int64_t head_dim = d_model / n_heads;
    if (rotary_dims < 2 || rotary_dims % 2 != 0 || rotary_dims > head_dim) {
      throw InputError(str_cat(where, ": rotary dimensions ", rotary_dims, ": expected an even number in 2..", head_dim,
                               " (the head dimension)"));
    }
    if (!(std::isfinite(rotary_base) && rotary_base > 1.0)) {
      throw InputError(str_cat(where, ": rotary base ", rotary_base, ": expected a finite number > 1"));
    }
  }
  if (!(std::isfinite(layer_norm_eps) && layer_norm_eps > 0.0)) {
    throw InputError(str_cat(where, ": layer norm epsilon ", layer_norm_eps, ": expected a finite number > 0"));
  }
}

TensorTree gpt_init(const GptConfig& c, c10::ScalarType dtype, uint64_t seed) {
  at::Generator gen = make_generator(derive_seed(seed, "gpt-init"));
  const auto opts = at::TensorOptions().dtype(dtype);
  const double std = 0.02, proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layers));
  auto normal = [&](std::vector<int64_t> shape, double s) {
    return at::normal(0.0, s, shape, gen, at::TensorOptions().dtype(at::kDouble)).to(dtype);
  };
  const int64_t d = c.d_model;
  TensorTree p;
  p.insert("tok_emb", normal({c.vocab, d}, std));
  if (c.positions == Positions::kLearned) p.insert("pos_emb", normal({c.max_len, d}, std));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    p.insert(block(l, "ln1.weight"), at::ones({d}, opts));
    p.insert(block(l, "ln1.bias"), at::zeros({d}, opts));
    p.insert(block(l, "attn.qkv.weight"), normal({3 * d, d}, std));
    p.insert(block(l, "attn.qkv.bias"), at::zeros({3 * d}, opts));
    p.insert(block(l, "attn.proj.weight"), normal({d, d}, proj_std));
    p.insert(block(l, "attn.proj.bias"), at::zeros({d}, opts));
    p.insert(block(l, "ln2.weight"), at::ones({d}, opts));
    p.insert(block(l, "ln2.bias"), at::zeros({d}, opts));
    p.insert(block(l, "mlp.fc.weight"), normal({4 * d, d}, std));
    p.insert(block(l, "mlp.fc.bias"), at::zeros({4 * d}, opts));
    p.insert(block(l, "mlp.proj.weight"), normal({d, 4 * d}, proj_std));
    p.insert(block(l, "mlp.proj.bias"), at::zeros({d}, opts));
  }
  p.insert("ln_f.weight", at::ones({d}, opts));
  p.insert("ln_f.bias", at::zeros({d}, opts));
  if (!c.tied_head) p.insert("head.weight", normal({c.vocab, d}, std));
  return p;
}

double gpt_parameter_count(const GptConfig& c, int64_t fsdp) {
  // rows × columns of one rank's shard, `times` tensors of the shape.
  const auto shard = [fsdp](int64_t rows, int64_t columns, double times) {
    return times * std::ceil(static_cast<double>(rows) / static_cast<double>(fsdp)) * static_cast<double>(columns);
  };
  const int64_t d = c.d_model;
  const auto L = static_cast<double>(c.n_layers);
  double count = shard(c.vocab, d, 1) + shard(d, 1, 2);  // tok_emb, ln_f
  if (c.positions == Positions::kLearned) count += shard(c.max_len, d, 1);
  if (!c.tied_head) count += shard(c.vocab, d, 1);
  // Each block: 2 LayerNorms, qkv, attn.proj, mlp.fc, mlp.proj.
  count += shard(d, 1, 4 * L) + shard(3 * d, d, L) + shard(3 * d, 1, L) + shard(d, d, L) + shard(d, 1, L) +
           shard(4 * d, d, L) + shard(4 * d, 1, L) + shard(d, 4 * d, L) + shard(d, 1, L);
  return count;
}

at::Tensor gpt_forward(const GptConfig& c, const TensorTree& p, const at::Tensor& input_ids, const at::Tensor& prefix) {
  const int64_t T = input_ids.size(1);
  if (T > c.max_len) throw std::invalid_argument(str_cat("gpt_forward: sequence of ", T, " > max_len ", c.max_len));
  return gpt_forward(c, p, input_ids, ModelLayout::whole(T), prefix);
}

at::Tensor gpt_forward(const GptConfig& c, const TensorTree& p, const at::Tensor& input, const ModelLayout& host_layout,
                       const at::Tensor& prefix) {
  // The layout's index tensors are made on the host; the forward runs where the parameters are.
  if (p.empty()) throw std::logic_error("gpt_forward: no parameters");
  const at::Device device = p.begin()->tensor.device();
  const ModelLayout layout = host_layout.to(device);
  const TensorParallel& tensor = *layout.tensor;
  const PipelineStage& stage = layout.stage;
  if (!stage.embeds) {
    if (prefix.defined() || input.dim() != 3) {
      throw std::logic_error(str_cat("gpt_forward: a chunk after the first takes hidden states [B, T, d], got ",
                                     input.sizes(), prefix.defined() ? " and a prefix" : ""));
    }
    return run_layers(c, p, input.to(device), layout);
  }
  at::Tensor x = embed_tokens(c, p.at("tok_emb"), input.to(device), tensor);
  if (prefix.defined()) {
    // A bridge that hands this rank another rank's rows must fail here, naming both shapes, rather
    // than reach the next collective with a batch its peers do not share.
    if (layout.residual_position_ids.defined() || prefix.dim() != 3 || prefix.size(0) != x.size(0) ||
        prefix.size(1) > x.size(1) || prefix.size(2) != x.size(2)) {
      throw std::logic_error(str_cat("gpt_forward: a prefix shaped ", prefix.sizes(), " does not fit the input ids ",
                                     input.sizes(), " (expected [", x.size(0), ", <= ", x.size(1), ", ", x.size(2),
                                     "])", layout.residual_position_ids.defined() ? " under sp" : ""));
    }
    // cat, not an in-place write: differentiable to any order, as REPLAY needs.
    const int64_t k = prefix.size(1);
    x = at::cat({prefix.to(x.scalar_type()), x.narrow(1, k, x.size(1) - k)}, 1);
  }
  if (c.positions == Positions::kLearned) {
    x = x + p.at("pos_emb").index_select(0, layout.embedded_positions().clamp_max(c.max_len - 1));
  }
  return run_layers(c, p, x, layout);
}

bool gpt_stage_uses(const GptConfig& c, const PipelineStage& stage, const std::string& name) {
  if (name.rfind("blocks.", 0) == 0) {
    const int64_t layer = std::stoll(name.substr(7, name.find('.', 7) - 7));
    return layer >= stage.begin_layer && layer < stage.end(c.n_layers);
  }
  if (name == "tok_emb") return stage.embeds || (stage.heads && c.tied_head);
  if (name == "pos_emb") return stage.embeds;
  return stage.heads;  // ln_f, head.weight
}

TensorTree gpt_stage_parameters(const GptConfig& c, const std::vector<PipelineStage>& chunks,
                                const TensorTree& params) {
  return params.filter([&](const std::string& name, const at::Tensor&) {
    for (const PipelineStage& stage : chunks) {
      if (gpt_stage_uses(c, stage, name)) return true;
    }
    return false;
  });
}

const ParallelPlan& gpt_parallel_plan() {
  static const ParallelPlan plan{
      {"tok_emb", TensorSplit::kVocabulary},
      {"head.weight", TensorSplit::kVocabulary},
      {"blocks.*.attn.qkv.weight", TensorSplit::kColumnwiseQkv},
      {"blocks.*.attn.qkv.bias", TensorSplit::kColumnwiseQkv},
      {"blocks.*.attn.proj.weight", TensorSplit::kRowwise},
      {"blocks.*.mlp.fc.weight", TensorSplit::kColumnwise},
      {"blocks.*.mlp.fc.bias", TensorSplit::kColumnwise},
      {"blocks.*.mlp.proj.weight", TensorSplit::kRowwise},
  };
  return plan;
}

void validate_tensor_parallel(const GptConfig& c, int64_t tp, const std::string& what) {
  if (tp > 1 && c.n_heads % tp != 0) {
    throw InputError(str_cat(what, ": tp=", tp, " does not divide the model's ", c.n_heads,
                             " attention heads (each tensor-parallel rank computes n_heads / tp whole heads)"));
  }
}

}  // namespace magic
