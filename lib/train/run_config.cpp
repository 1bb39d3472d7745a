#include "lib/train/run_config.h"

#include <algorithm>
#include <filesystem>

#include "lib/core/byte_size.h"
#include "lib/core/config_file.h"
#include "lib/core/error.h"
#include "lib/core/json_fields.h"
#include "lib/core/seed.h"
#include "lib/core/strings.h"
#include "lib/data/patch_features.h"
#include "lib/model/gpt_init_file.h"
#include "lib/model/hf_model_folder.h"

namespace magic {
namespace {

std::string resolve(const std::string& path, const std::string& base_dir) {
  if (path.empty() || std::filesystem::path(path).is_absolute() || base_dir.empty()) return path;
  return (std::filesystem::path(base_dir) / path).lexically_normal().string();
}

// "text" reads text_field; "prompt_completion" reads prompt_field and completion_field.
DocumentFields read_fields(const JsonFields& data) {
  DocumentFields fields;
  const std::string format = data.string("format", "text");
  if (format == "prompt_completion") {
    fields.prompt = data.string("prompt_field", "prompt");
    fields.text = data.string("completion_field", "completion");
    if (data.has("text_field"))
      data.fail("text_field", "is for format \"text\"; pairs read prompt_field and completion_field");
  } else if (format == "text") {
    fields.text = data.string("text_field", fields.text);
    for (const char* key : {"prompt_field", "completion_field"}) {
      if (data.has(key)) data.fail(key, "is for format \"prompt_completion\"");
    }
  } else {
    data.fail("format", str_cat("unknown format '", format, "' (expected text or prompt_completion)"));
  }
  fields.id = data.string("id_field", fields.id);
  if (!fields.prompt.empty() && fields.prompt == fields.text) {
    data.fail("prompt_field", "names the same field as completion_field");
  }
  return fields;
}

// "queries": a path, or {"path", "slice": [begin, end]} (the path defaulting to the train file).
void read_queries(const JsonFields& data, RunConfig& c, const std::string& base_dir) {
  if (!data.has("queries") || !data.raw("queries", {}).is_object()) {
    c.query_path = resolve(data.string("queries"), base_dir);
    return;
  }
  const JsonFields queries = data.object("queries");
  c.query_path = queries.has("path") ? resolve(queries.string("path"), base_dir) : c.train_path;
  if (queries.has("slice")) {
    const std::vector<double> bounds = queries.numbers("slice");
    const bool integral = bounds.size() == 2 && std::all_of(bounds.begin(), bounds.end(), [](double b) {
                            return b >= 0 && b == static_cast<double>(static_cast<int64_t>(b));
                          });
    if (!integral || bounds[0] >= bounds[1]) {
      queries.fail("slice", "expected [begin, end]: two integers, 0 <= begin < end (documents begin..end-1)");
    }
    c.query_slice = std::make_pair(static_cast<int64_t>(bounds[0]), static_cast<int64_t>(bounds[1]));
  } else if (!queries.has("path")) {
    queries.fail("slice", "missing: queries from the train file are a slice of it, held out of training");
  }
  queries.finish();
}

}  // namespace

RunConfig RunConfig::from_json(const nlohmann::json& json, const std::string& source, const std::string& base_dir) {
  return from_json(json, std::make_shared<const ValueSources>(source), base_dir);
}

RunConfig RunConfig::from_json(const nlohmann::json& json, std::shared_ptr<const ValueSources> sources,
                               const std::string& base_dir) {
  RunConfig c;
  c.source = sources->file();
  c.sources = sources;
  JsonFields root(json, sources);
  const int64_t seed = root.integer("seed", 0);
  if (seed < 0) root.fail("seed", "expected an integer >= 0");
  c.seed = static_cast<uint64_t>(seed);
  c.precision = PrecisionPolicy::from_json(root, "dtype", "fp64");
  const std::string device = root.optional_string("device").value_or("cpu");
  if (device != "cpu" && device != "cuda")
    root.fail("device", str_cat("unknown device '", device, "'; expected cpu or cuda"));
  c.device = parse_device(device, "device");
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
  if (root.has("encoder")) {
    c.encoder = PatchEncoderConfig::from_json(root.object("encoder"), c.model.d_model);
    c.patches_path = resolve(data.string("patches"), base_dir);
    if (c.model.max_len < c.encoder->patches + 2) {
      model.fail("max_len",
                 str_cat("expected >= encoder.patches + 2 = ", c.encoder->patches + 2,
                         " (the prefix's patches, then at least a token and its next), got ", c.model.max_len));
    }
  } else if (data.has("patches")) {
    data.fail("patches", "patch features need an \"encoder\" section (a multimodal run)");
  }
  read_queries(data, c, base_dir);
  c.fields = read_fields(data);
  c.fit = parse_fit(data.string("fit", "chunk"), data.where("fit"));
  if (data.has("max_documents")) {
    c.max_documents = data.integer("max_documents");
    if (*c.max_documents < 1) data.fail("max_documents", str_cat("expected an integer >= 1, got ", *c.max_documents));
  }
  data.finish();

  JsonFields training = root.object("training");
  c.steps = training.integer("steps");
  // Bounded so that the checkpoint schedules' arithmetic (squares of step counts) cannot overflow;
  // far above any run, which the memory estimate refuses long before.
  constexpr int64_t kMaxSteps = int64_t{1} << 40;
  if (c.steps < 1 || c.steps > kMaxSteps) {
    training.fail("steps", str_cat("expected an integer from 1 to 2^40 (", kMaxSteps, "), got ", c.steps));
  }
  c.batch_size = training.integer("batch_size");
  if (c.batch_size < 1) training.fail("batch_size", str_cat("expected an integer >= 1, got ", c.batch_size));
  c.shuffle = training.boolean("shuffle", true);
  c.reduction = parse_reduction(training.string("reduction", "mean"), training.where("reduction"));
  c.label_smoothing = training.number("label_smoothing", 0.0);
  if (!(c.label_smoothing >= 0.0 && c.label_smoothing < 1.0)) {
    training.fail("label_smoothing", str_cat("expected a number in [0, 1), got ", c.label_smoothing));
  }
  c.weights = parse_weight_kind(training.string("weights", "per_document"), training.where("weights"));
  if (training.raw("checkpoints", nlohmann::json()).is_object()) {
    // A memory budget: the fewest recomputations whose states fit (checkpoint_plan.h).
    const JsonFields checkpoints = training.object("checkpoints");
    c.checkpoints = CheckpointSchedule::kBudget;
    c.checkpoint_budget = parse_byte_size(checkpoints.string("budget"), checkpoints.where("budget"));
    checkpoints.finish();
    constexpr int64_t kMaxBudgetSteps = 1000000;  // planning is linear in the steps
    if (c.steps > kMaxBudgetSteps) {
      training.fail("checkpoints", str_cat("a budget plans at most ", kMaxBudgetSteps, " steps, and training.steps is ",
                                           c.steps, "; use \"sqrt\""));
    }
  } else {
    c.checkpoints = parse_checkpoint_schedule(training.string("checkpoints", "sqrt"), training.where("checkpoints"));
  }
  if (auto spill = training.optional_string("spill_dir")) c.spill_dir = resolve(*spill, base_dir);
  training.finish();

  c.optimizer = OptimizerConfig::from_json(root.object("optimizer"), c.steps);
  root.finish();
  return c;
}

RunConfig RunConfig::load(const std::string& path, const std::vector<ConfigOverride>& overrides) {
  const nlohmann::json json = apply_overrides(read_config_file(path), overrides);
  RunConfig c = from_json(json, std::make_shared<const ValueSources>(path, overrides),
                          std::filesystem::path(path).parent_path().string());
  c.resolved = json;
  c.overrides = overrides;
  return c;
}

std::string RunConfig::where(const std::string& field) const {
  return sources ? sources->value(field) : str_cat(source, ": ", field);
}

std::string RunConfig::where() const {
  return sources ? sources->object("") : source;
}

std::vector<InputFile> input_files(const RunConfig& c) {
  std::vector<InputFile> files = {{"train data", c.train_path}, {"query data", c.query_path}};
  if (c.encoder) files.push_back({"patch features", c.patches_path});
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

namespace {

// The documents of a data file, which must hold one: an empty file would otherwise be reported far
// from its cause (a batch that cannot be filled, a query set with nothing to score).
std::vector<TextDocument> load_data(const std::string& path, const DocumentFields& fields, const std::string& role) {
  std::vector<TextDocument> documents = load_documents(path, fields);
  if (documents.empty()) {
    std::error_code ec;
    const bool nothing = std::filesystem::file_size(path, ec) == 0;
    throw InputError(
        str_cat(path, ": the ", role, " is empty: the file holds ", nothing ? "nothing" : "only blank lines"));
  }
  return documents;
}

std::vector<TextDocument> slice_of(const std::vector<TextDocument>& documents, std::pair<int64_t, int64_t> slice,
                                   const RunConfig& c) {
  const auto n = static_cast<int64_t>(documents.size());
  if (slice.second > n) {
    throw InputError(str_cat(c.where("data.queries.slice"), " [", slice.first, ", ", slice.second, "] goes past the ",
                             n, " documents of ", c.query_path));
  }
  if (c.query_path == c.train_path && slice.second - slice.first == n) {
    throw InputError(str_cat(c.where("data.queries.slice"), " holds out all ", n, " documents of ", c.train_path,
                             ": nothing is left to train on"));
  }
  return {documents.begin() + slice.first, documents.begin() + slice.second};
}

}  // namespace

LmProblem build_lm_problem(const RunConfig& c, std::shared_ptr<const Parallelism> parallelism,
                           std::shared_ptr<const MixedPrecision> precision,
                           std::shared_ptr<const MicroBatches> micro_batches,
                           std::shared_ptr<const PrefixEncoder> prefix) {
  if (!precision) precision = std::make_shared<MixedPrecision>(c.precision);
  if (c.encoder && !prefix) prefix = std::make_shared<PatchPrefix>(*c.encoder);
  if (!c.encoder) prefix = nullptr;
  // A multimodal sequence is the prefix's patches, then the text.
  const int64_t text_len = c.model.max_len - (c.encoder ? c.encoder->patches : 0);
  if (!micro_batches) micro_batches = std::make_shared<MicroBatches>();
  LmProblem p;
  p.model = c.model;
  if (c.model_folder) {
    p.tokenizer = std::make_shared<FolderTokenizer>(*c.model_folder);
  } else {
    p.tokenizer = std::make_shared<ByteTokenizer>();
  }
  const DocumentTokenizer& tokenizer = *p.tokenizer;
  if (p.model.vocab < tokenizer.vocab_bound()) {
    throw InputError(str_cat(c.where("model.vocab"), " ", p.model.vocab, " is below the ", tokenizer.vocab_bound(),
                             " ids of the tokenizer (", tokenizer.description(), ")"));
  }
  // Errors about the data say which file it is to the run.
  const std::string train_role = "training data (data.train)", query_role = "query data (data.queries)";
  p.train_documents = load_data(c.train_path, c.fields, train_role);
  if (c.query_path == c.train_path && c.query_slice) {
    p.query_documents = slice_of(p.train_documents, *c.query_slice, c);
    const auto [begin, end] = *c.query_slice;
    p.train_documents.erase(p.train_documents.begin() + begin, p.train_documents.begin() + end);
  } else {
    p.query_documents = load_data(c.query_path, c.fields, query_role);
    if (c.query_slice) p.query_documents = slice_of(p.query_documents, *c.query_slice, c);
  }
  if (c.max_documents && static_cast<int64_t>(p.train_documents.size()) > *c.max_documents) {
    p.train_documents.resize(*c.max_documents);
  }
  auto train = std::make_shared<TokenDataset>(
      tokenize_documents(p.train_documents, tokenizer, text_len, str_cat(c.train_path, ": the ", train_role), c.fit));
  // A query is a document: packing would mix queries, so packed runs cut queries into chunks.
  const Fit query_fit = c.fit == Fit::kTruncate ? Fit::kTruncate : Fit::kChunk;
  TokenDataset queries = tokenize_documents(p.query_documents, tokenizer, text_len,
                                            str_cat(c.query_path, ": the ", query_role), query_fit);
  if (c.encoder) {
    if (c.fit == Fit::kPack)
      throw InputError(c.where("data.fit") + ": a multimodal run's rows are documents; pack mixes them");
    const PatchEncoderConfig& e = *c.encoder;
    *train = with_patch_prefix(*train,
                               load_patch_features(c.patches_path, p.train_documents, *train, e.patches, e.features));
    queries = with_patch_prefix(queries,
                                load_patch_features(c.patches_path, p.query_documents, queries, e.patches, e.features));
  }
  // Queries are documents (LmQuery): each must give at least one example to be scored on.
  std::vector<bool> scored(p.query_documents.size(), false);
  for (const auto& ex : queries.examples) scored[ex.document] = true;
  for (size_t d = 0; d < scored.size(); ++d) {
    if (!scored[d]) {
      throw InputError(str_cat(c.query_path, ": query '", p.query_documents[d].id, "' has no token to predict"));
    }
  }
  p.train = train;
  p.stream = std::make_shared<DataStream>(
      train->size(), StreamConfig{c.batch_size, c.steps, derive_seed(c.seed, "data-order"), c.shuffle}, c.train_path);
  auto optimizer = make_optimizer(c.optimizer);
  p.optimizer = optimizer;
  p.step = std::make_shared<LmStep>(p.model, train, *p.stream, c.reduction, c.label_smoothing, optimizer,
                                    c.optimizer.clip_norm, parallelism, precision, micro_batches, prefix);
  p.query = std::make_shared<LmQuery>(p.model, std::move(queries), parallelism, precision, prefix);
  p.prefix = prefix;
  // Parameters, optimizer state and data weights live in the master dtype.
  const TensorTree init = c.model_folder
                              ? load_model_folder(*c.model_folder, c.precision.master, p.model.max_len).params
                          : c.model_init ? load_gpt_init(*c.model_init, p.model, c.precision.master)
                                         : gpt_init(p.model, c.precision.master, c.seed);
  const TensorTree whole = c.encoder ? merge(init, patch_encoder_init(*c.encoder, c.precision.master, c.seed)) : init;
  // Parameters and optimizer state on the rank's device (run_device.h); made on the host from the
  // seed first, so that every device starts from the same values.
  const at::Device device = current_device(c.device);
  p.initial = TrainState{parallelism->shard(to_device(whole, device)), {}, {}};
  p.initial.opt = to_device(optimizer->init(p.initial.params), device);
  p.weights = initial_weights(*train, c.weights, c.precision.master);
  return p;
}

}  // namespace magic
