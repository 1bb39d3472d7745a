// The magic-run configuration file (JSON or YAML). Relative data paths are resolved against the
// directory of the config file, so a config works from any working directory.
//   {"seed": 0, "device": "cpu" | "cuda" (run_device.h),
//    "dtype": "fp64" | "bf16" | {"compute", "master", "reduce", "loss_scale"} (precision_policy.h),
//    "model": {"vocab", "d_model", "n_layers", "n_heads", "max_len", "init": safetensors path (gpt_init_file.h)}
//             or {"path": a model folder (hf_model_folder.h), "max_len": the sequence length},
//    "data": {"train": path, "queries": path or {"path" (default: the train file), "slice": [begin, end]},
//             "format": "text" | "prompt_completion", "text_field": "text", "prompt_field": "prompt",
//             "completion_field": "completion", "id_field": "id", "fit": "chunk" | "truncate" | "pack",
//             "max_documents": n (use the first n training documents)},
//    A query slice of the train file is held out of training (a train/query split).
//    "training": {"steps", "batch_size", "shuffle", "reduction", "label_smoothing", "weights", "checkpoints",
//                 "spill_dir"},
//    "optimizer": {"name", "lr", ... , "schedule": {...}},
//    "encoder": {"patches", "features", "hidden"} (a multimodal run: patch_encoder.h), with
//             "data.patches": a safetensors file of each document's patch features (patch_features.h);
//             model.max_len counts the prefix's patches and the text's tokens}
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lib/core/config_file.h"
#include "lib/core/precision_policy.h"
#include "lib/core/run_device.h"
#include "lib/data/data_stream.h"
#include "lib/model/gpt.h"
#include "lib/model/lm_loss.h"
#include "lib/model/patch_encoder.h"
#include "lib/optim/optimizer.h"
#include "lib/train/checkpoint_schedule.h"
#include "lib/train/lm_step.h"

namespace magic {

// The config's keys outside any section: the command line sets them as --seed VALUE, --dtype VALUE.
inline const std::vector<std::string> kRunConfigTopLevelKeys{"seed", "dtype", "device"};

struct RunConfig {
  std::string source = "config";
  uint64_t seed = 0;
  PrecisionPolicy precision;
  DeviceKind device = DeviceKind::kCpu;  // "device": where the run computes (run_device.h)
  GptConfig model;
  std::optional<std::string> model_init;    // initial parameters from this file instead of gpt_init
  std::optional<std::string> model_folder;  // architecture, weights and tokenizer from this folder
  // A multimodal run: the encoder of each document's patch features (data.patches), whose outputs
  // are the first encoder->patches columns of every sequence.
  std::optional<PatchEncoderConfig> encoder;
  std::string patches_path;
  std::string train_path, query_path;
  DocumentFields fields;
  Fit fit = Fit::kChunk;
  // Documents [begin, end) of the query file; held out of training when it is the train file.
  std::optional<std::pair<int64_t, int64_t>> query_slice;
  std::optional<int64_t> max_documents;
  int64_t steps = 1, batch_size = 8;
  bool shuffle = true;
  Reduction reduction = Reduction::kMean;
  double label_smoothing = 0.0;  // ε in [0, 1) of the training loss (lm_loss.h)
  WeightKind weights = WeightKind::kPerDocument;
  CheckpointSchedule checkpoints = CheckpointSchedule::kSqrt;
  int64_t checkpoint_budget = 0;  // "checkpoints": {"budget": "256MiB"}: bytes REPLAY's states may take
  std::optional<std::string> spill_dir;
  OptimizerConfig optimizer;

  // The config as read (YAML or JSON) with the overrides set: what run.json records and what
  // names a resumable run. from_json leaves them empty.
  nlohmann::json resolved;
  std::vector<ConfigOverride> overrides;

  // Where each value came from (the file, or the override that set it), for errors found after
  // reading: where("model.vocab") is "FILE: model.vocab" or "--model.vocab=100".
  // where() names the config as a whole, with the flags that set values in it.
  std::shared_ptr<const ValueSources> sources;
  std::string where(const std::string& field) const;
  std::string where() const;

  static RunConfig from_json(const nlohmann::json& json, const std::string& source, const std::string& base_dir);
  static RunConfig from_json(const nlohmann::json& json, std::shared_ptr<const ValueSources> sources,
                             const std::string& base_dir);
  // A JSON or YAML file (config_file.h), `overrides` applied before it is read; errors name the
  // flag that gave a value where an override set it.
  static RunConfig load(const std::string& path, const std::vector<ConfigOverride>& overrides = {});
};

// A file the run reads and what it is to the run ("train data", "query data", "model.init",
// "model.path": each regular file of the folder, sorted by name).
struct InputFile {
  std::string role, path;
};
std::vector<InputFile> input_files(const RunConfig& config);

// Everything a single-process LM MAGIC run needs, built from a RunConfig.
struct LmProblem {
  GptConfig model;
  std::shared_ptr<const DocumentTokenizer> tokenizer;
  std::vector<TextDocument> train_documents, query_documents;
  std::shared_ptr<const TokenDataset> train;
  std::shared_ptr<const DataStream> stream;
  std::shared_ptr<const Optimizer> optimizer;
  std::shared_ptr<const LmStep> step;
  std::shared_ptr<const LmQuery> query;
  std::shared_ptr<const PrefixEncoder> prefix;  // a multimodal run's; null: text only
  TrainState initial;
  at::Tensor weights;
};

// `parallelism` decides how each step's batch, the queries and the parameters split across
// ranks; every rank builds the same problem (same seed, data, init) and keeps its own share
// (initial.params and the optimizer state are this rank's shards).
// `precision` applies config.precision (a planted variant of it in magic-check; null: the plain one).
// `micro_batches` splits each rank's rows of a step for gradient accumulation (the topology's mb;
// null: one micro-batch). `prefix`: how a multimodal run's ranks compute the prefix (a bridge:
// lib/distributed/parallel/bridged_prefix.h); null: PatchPrefix, the encoder on every row held.
// A multimodal run's parameters are the GPT's, then the encoder's ("encoder.*").
LmProblem build_lm_problem(const RunConfig& config,
                           std::shared_ptr<const Parallelism> parallelism = std::make_shared<SingleProcess>(),
                           std::shared_ptr<const MixedPrecision> precision = nullptr,
                           std::shared_ptr<const MicroBatches> micro_batches = nullptr,
                           std::shared_ptr<const PrefixEncoder> prefix = nullptr);

}  // namespace magic
