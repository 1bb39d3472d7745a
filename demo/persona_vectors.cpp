// demo-persona-vectors: one direction per layer of a run's model, the mean hidden state of the
// training examples of one topic minus that of another (the topic begins each id: "law:Lev1:1"),
// written as a safetensors file keyed by layer ("blocks.0", ...) for magic-run --trace-vectors.
// The tracer's projection compressor then shows, per layer and step, where the batch's hidden
// states lie along it: the persona-vector monitoring of Megatron's tensor tracer demonstration,
// here on the demonstration's topic split (docs/tracer.md, "Demonstration").
#include <CLI/CLI.hpp>

#include <iostream>

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/io/safetensors.h"
#include "lib/model/gpt.h"
#include "lib/trace/trace_context.h"
#include "lib/trace/trace_sink.h"
#include "lib/train/run_config.h"

namespace {

using namespace magic;

// Keeps the hidden state after each block ("blocks.0", ...) of one forward.
struct BlockOutputs : TraceSink {
  std::map<std::string, at::Tensor> by_layer;
  void write(const TraceRecord& record, const at::Tensor& tensor) override {
    if (record.kind == "activation") by_layer[record.layer] = tensor.detach().to(at::kDouble);
  }
};

// The rows of the training set whose example id begins with "topic:".
at::Tensor rows_of(const TokenDataset& data, const std::string& topic) {
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < data.size(); ++i) {
    if (data.examples[i].id.rfind(topic + ":", 0) == 0) rows.push_back(i);
  }
  if (rows.empty()) throw InputError("no training example's id begins with \"" + topic + ":\"");
  return at::tensor(rows, at::kLong);
}

// Each layer's mean hidden state over the real (not padding) positions of `rows`.
std::map<std::string, at::Tensor> mean_hidden_states(const LmProblem& p, const at::Tensor& rows) {
  const at::Tensor ids = p.train->input_ids.index_select(0, rows);
  std::vector<int64_t> lengths;
  for (int64_t i = 0; i < rows.numel(); ++i) lengths.push_back(p.train->examples[rows[i].item<int64_t>()].length);
  const at::Tensor real =
      (at::arange(ids.size(1), at::kLong).unsqueeze(0) < at::tensor(lengths, at::kLong).unsqueeze(1))
          .to(at::kDouble);  // [rows, T]
  BlockOutputs outputs;
  {
    at::NoGradGuard no_grad;
    ScopedTraceSink listening(&outputs);
    TraceContext context;
    context.active = true;
    context.step = 0;
    ScopedTraceContext in_step(context);
    gpt_forward(p.model, p.initial.params, ids);
  }
  std::map<std::string, at::Tensor> means;
  for (const auto& [layer, h] : outputs.by_layer) {
    means[layer] = (h * real.unsqueeze(-1)).sum(at::IntArrayRef{0, 1}) / real.sum();  // Σ h·mask / Σ mask, per feature
  }
  return means;
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_path, topic_a, topic_b, out;
  CLI::App app{"demo-persona-vectors: one direction per layer, the mean hidden state of topic A minus topic B"};
  app.add_option("--config", config_path, "the run's config (its model, tokenizer and training file)")->required();
  app.add_option("--a", topic_a, "the topic the direction points to (ids begin with it)")->required();
  app.add_option("--b", topic_b, "the topic it points away from")->required();
  app.add_option("--out", out, "the safetensors file to write")->required();
  CLI11_PARSE(app, argc, argv);
  try {
    const LmProblem p = build_lm_problem(RunConfig::load(config_path));
    const at::Tensor rows_a = rows_of(*p.train, topic_a), rows_b = rows_of(*p.train, topic_b);
    const auto a = mean_hidden_states(p, rows_a), b = mean_hidden_states(p, rows_b);
    TensorTree vectors;
    std::cout << "demo-persona-vectors: " << topic_a << " (" << rows_a.numel() << " examples) minus " << topic_b << " ("
              << rows_b.numel() << "), model " << config_path << "\n";
    for (const auto& [layer, mean_a] : a) {
      const at::Tensor d = mean_a - b.at(layer);
      vectors.insert(layer, d.to(at::kFloat));
      std::cout << "  " << layer << ": |mean " << topic_a << " - mean " << topic_b
                << "| = " << format_fixed(d.norm().item<double>(), 4) << "\n";
    }
    save_safetensors(out, vectors, {{"a", topic_a}, {"b", topic_b}, {"config", config_path}});
    std::cout << "demo-persona-vectors: wrote " << out << std::endl;
    return 0;
  } catch (const InputError& e) {
    std::cerr << "demo-persona-vectors: error: " << e.what() << "\n";
    return kExitBadInput;
  }
}
