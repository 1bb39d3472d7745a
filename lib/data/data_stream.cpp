#include "lib/data/data_stream.h"

#include "lib/core/error.h"
#include "lib/core/seed.h"
#include "lib/core/strings.h"
#include "lib/model/lm_loss.h"

namespace magic {

WeightKind parse_weight_kind(const std::string& name, const std::string& what) {
  if (name == "per_document") return WeightKind::kPerDocument;
  if (name == "per_token") return WeightKind::kPerToken;
  throw InputError(str_cat(what, ": unknown weight kind '", name, "'; expected per_document or per_token"));
}

std::string weight_kind_name(WeightKind kind) {
  return kind == WeightKind::kPerDocument ? "per_document" : "per_token";
}

DataStream::DataStream(int64_t num_examples, StreamConfig config, const std::string& source)
    : num_examples_(num_examples), config_(config) {
  if (config_.batch_size < 1) throw InputError(str_cat(source, ": batch_size must be >= 1, got ", config_.batch_size));
  if (config_.steps < 1) throw InputError(str_cat(source, ": steps must be >= 1, got ", config_.steps));
  if (num_examples_ < config_.batch_size) {
    throw InputError(str_cat(source, ": too few examples for one batch: ", num_examples_, " examples, batch_size ",
                             config_.batch_size));
  }
}

std::vector<int64_t> DataStream::rows(int64_t step) const {
  const int64_t per_epoch = batches_per_epoch();
  const int64_t epoch = step / per_epoch, slot = step % per_epoch;
  std::vector<int64_t> order;
  if (config_.shuffle) {
    order = permutation(num_examples_, derive_seed(config_.seed, "epoch", static_cast<uint64_t>(epoch)));
  } else {
    order.resize(num_examples_);
    for (int64_t i = 0; i < num_examples_; ++i) order[i] = i;
  }
  std::vector<int64_t> rows(config_.batch_size, padding_row());
  for (int64_t i = 0; i < config_.batch_size; ++i) {
    const int64_t position = slot * config_.batch_size + i;
    if (position < num_examples_) rows[i] = order[position];
  }
  return rows;
}

Batch make_batch(const TokenDataset& data, const std::vector<int64_t>& rows) {
  const int64_t T = data.max_len();
  at::Tensor pad_ids = at::full({1, T}, data.pad_id, at::kLong);
  at::Tensor pad_labels = at::full({1, T}, kIgnoreLabel, at::kLong);
  Batch batch;
  batch.rows = at::tensor(rows, at::kLong);
  batch.input_ids = at::cat({data.input_ids, pad_ids}).index_select(0, batch.rows);
  batch.labels = at::cat({data.labels, pad_labels}).index_select(0, batch.rows);
  return batch;
}

at::Tensor initial_weights(const TokenDataset& data, WeightKind kind, c10::ScalarType dtype) {
  const auto opts = at::TensorOptions().dtype(dtype);
  if (kind == WeightKind::kPerDocument) return at::ones({data.size()}, opts);
  return at::ones({data.size(), data.max_len()}, opts);
}

at::Tensor gather_weights(const at::Tensor& w, const at::Tensor& rows) {
  std::vector<int64_t> pad_shape = w.sizes().vec();
  pad_shape[0] = 1;
  return at::cat({w, at::zeros(pad_shape, w.options())}).index_select(0, rows);
}

}  // namespace magic
