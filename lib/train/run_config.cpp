#include "lib/train/run_config.h"

#include <algorithm>
#include <filesystem>

#include "lib/core/config_file.h"
#include "lib/core/error.h"
#include "lib/core/json_fields.h"
#include "lib/core/seed.h"
#include "lib/core/strings.h"
#include "lib/model/gpt_init_file.h"
#include "lib/model/hf_model_folder.h"

namespace magic {
namespace {

std::string resolve(const std::string& path, const std::string& base_dir) {
  if (path.empty() || std::filesystem::path(path).is_absolute() || base_dir.empty()) return path;
  return (std::filesystem::path(base_dir) / path).lexically_normal().string();
}

}  // namespace

RunConfig RunConfig::from_json(const nlohmann::json& json, const std::string& source, const std::string& base_dir) {
  RunConfig c;
  c.source = source;
  JsonFields root(json, source);
  const int64_t seed = root.integer("seed", 0);
  if (seed < 0) root.fail("seed", "expected an integer >= 0");
  c.seed = static_cast<uint64_t>(seed);
  c.precision = PrecisionPolicy::from_json(root.raw("dtype", "fp64"), source + ": dtype");
  const JsonFields model = root.object("model");
  if (model.has("path")) {
    // A model folder (hf_model_folder.h) brings its architecture, weights and tokenizer; the run
    // says only how long its sequences are.
    c.model_folder = resolve(model.string("path"), base_dir);
    const int64_t max_len = model.integer("max_len");
    if (max_len < 2) model.fail("max_len", str_cat("expected an integer >= 2, got ", max_len));
    model.finish();
    c.model = read_model_config(*c.model_folder, max_len).config;
  } else {
    if (auto init = model.optional_string("init")) c.model_init = resolve(*init, base_dir);
    c.model = GptConfig::from_json(model);
  }

  JsonFields data = root.object("data");
  c.train_path = resolve(data.string("train"), base_dir);
  c.query_path = resolve(data.string("queries"), base_dir);
  c.text_field = data.string("text_field", c.text_field);
  c.id_field = data.string("id_field", c.id_field);
  if (data.has("max_documents")) {
    c.max_documents = data.integer("max_documents");
    if (*c.max_documents < 1) data.fail("max_documents", str_cat("expected an integer >= 1, got ", *c.max_documents));
  }
  data.finish();

  JsonFields training = root.object("training");
  c.steps = training.integer("steps");
  if (c.steps < 1) training.fail("steps", str_cat("expected an integer >= 1, got ", c.steps));
  c.batch_size = training.integer("batch_size");
  if (c.batch_size < 1) training.fail("batch_size", str_cat("expected an integer >= 1, got ", c.batch_size));
  c.shuffle = training.boolean("shuffle", true);
  c.reduction = parse_reduction(training.string("reduction", "mean"), training.field("reduction"));
  c.weights = parse_weight_kind(training.string("weights", "per_document"), training.field("weights"));
  c.checkpoints = parse_checkpoint_schedule(training.string("checkpoints", "sqrt"), training.field("checkpoints"));
  if (auto spill = training.optional_string("spill_dir")) c.spill_dir = resolve(*spill, base_dir);
  training.finish();

  c.optimizer = OptimizerConfig::from_json(root.object("optimizer"), c.steps);
  root.finish();
  return c;
}

RunConfig RunConfig::load(const std::string& path, const std::vector<ConfigOverride>& overrides) {
  const nlohmann::json json = apply_overrides(read_config_file(path), overrides);
  RunConfig c = from_json(json, path, std::filesystem::path(path).parent_path().string());
  c.resolved = json;
  c.overrides = overrides;
  return c;
}

std::vector<InputFile> input_files(const RunConfig& c) {
  std::vector<InputFile> files = {{"train data", c.train_path}, {"query data", c.query_path}};
  if (c.model_init) files.push_back({"model.init", *c.model_init});
  if (c.model_folder) {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(*c.model_folder)) {
      if (e.is_regular_file()) names.push_back(e.path().string());
    }
    std::sort(names.begin(), names.end());
    for (const auto& name : names) files.push_back({"model.path", name});
  }
  return files;
}

LmProblem build_lm_problem(const RunConfig& c, std::shared_ptr<const Parallelism> parallelism,
                           std::shared_ptr<const MixedPrecision> precision) {
  if (!precision) precision = std::make_shared<MixedPrecision>(c.precision);
  LmProblem p;
  p.model = c.model;
  if (c.model_folder) {
    p.tokenizer = std::make_shared<FolderTokenizer>(*c.model_folder);
  } else {
    p.tokenizer = std::make_shared<ByteTokenizer>();
  }
  const DocumentTokenizer& tokenizer = *p.tokenizer;
  if (p.model.vocab < tokenizer.vocab_bound()) {
    throw InputError(str_cat(c.source, ": model.vocab ", p.model.vocab, " is below the ", tokenizer.vocab_bound(),
                             " ids of the tokenizer (", tokenizer.description(), ")"));
  }
  p.train_documents = load_documents(c.train_path, c.text_field, c.id_field);
  if (c.max_documents && static_cast<int64_t>(p.train_documents.size()) > *c.max_documents) {
    p.train_documents.resize(*c.max_documents);
  }
  p.query_documents = load_documents(c.query_path, c.text_field, c.id_field);
  auto train =
      std::make_shared<TokenDataset>(tokenize_documents(p.train_documents, tokenizer, c.model.max_len, c.train_path));
  TokenDataset queries = tokenize_documents(p.query_documents, tokenizer, c.model.max_len, c.query_path);
  // Queries are documents (LmQuery): each must give at least one example to be scored on.
  std::vector<bool> scored(p.query_documents.size(), false);
  for (const auto& ex : queries.examples) scored[ex.document] = true;
  for (size_t d = 0; d < scored.size(); ++d) {
    if (!scored[d]) {
      throw InputError(
          str_cat(c.query_path, ": query '", p.query_documents[d].id, "' has fewer than 2 tokens: nothing to predict"));
    }
  }
  p.train = train;
  p.stream = std::make_shared<DataStream>(
      train->size(), StreamConfig{c.batch_size, c.steps, derive_seed(c.seed, "data-order"), c.shuffle}, c.train_path);
  auto optimizer = make_optimizer(c.optimizer);
  p.optimizer = optimizer;
  p.step = std::make_shared<LmStep>(p.model, train, *p.stream, c.reduction, optimizer, c.optimizer.clip_norm,
                                    parallelism, precision);
  p.query = std::make_shared<LmQuery>(p.model, std::move(queries), parallelism, precision);
  // Parameters, optimizer state and data weights live in the master dtype.
  const TensorTree init = c.model_folder
                              ? load_model_folder(*c.model_folder, c.precision.master, p.model.max_len).params
                          : c.model_init ? load_gpt_init(*c.model_init, p.model, c.precision.master)
                                         : gpt_init(p.model, c.precision.master, c.seed);
  p.initial = TrainState{parallelism->shard(init), {}, {}};
  p.initial.opt = optimizer->init(p.initial.params);
  p.weights = initial_weights(*train, c.weights, c.precision.master);
  return p;
}

}  // namespace magic
