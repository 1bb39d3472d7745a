#include "lib/data/patch_features.h"

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/io/safetensors.h"
#include "lib/model/lm_loss.h"

namespace magic {

at::Tensor load_patch_features(const std::string& path, const std::vector<TextDocument>& documents,
                               const TokenDataset& data, int64_t patches, int64_t features) {
  const SafetensorsFile file = load_safetensors(path);
  std::vector<at::Tensor> by_document;
  for (const TextDocument& document : documents) {
    if (!file.tensors.contains(document.id)) {
      throw InputError(str_cat(path, ": no patch features for document '", document.id,
                               "' (expected a tensor named by its id, shaped [", patches, ", ", features, "])"));
    }
    const at::Tensor& t = file.tensors.at(document.id);
    if (t.dim() != 2 || t.size(0) != patches || t.size(1) != features) {
      throw InputError(str_cat(path, ": document '", document.id, "': patch features shaped ", t.sizes(),
                               ", expected [", patches, ", ", features, "] (encoder.patches, encoder.features)"));
    }
    if (!t.is_floating_point() || !at::isfinite(t).all().item<bool>()) {
      throw InputError(str_cat(path, ": document '", document.id, "': patch features must be finite floats"));
    }
    by_document.push_back(t.to(at::kDouble));
  }
  std::vector<at::Tensor> rows;
  for (const Example& example : data.examples) rows.push_back(by_document.at(example.document));
  return rows.empty() ? at::zeros({0, patches, features}, at::kDouble) : at::stack(rows);
}

TokenDataset with_patch_prefix(TokenDataset data, at::Tensor patches) {
  const int64_t N = data.input_ids.size(0), P = patches.size(1);
  data.input_ids = at::cat({at::full({N, P}, data.pad_id, at::kLong), data.input_ids}, 1);
  data.labels = at::cat({at::full({N, P}, kIgnoreLabel, at::kLong), data.labels}, 1);
  data.patches = std::move(patches);
  return data;
}

at::Tensor patches_of_rows(const at::Tensor& patches, const std::vector<int64_t>& rows) {
  // Gathers the rows asked for only (a step's batch), not a padded copy of the whole table.
  const int64_t N = patches.size(0);
  const at::Tensor index = at::tensor(rows, at::kLong);
  if (N == 0) return at::zeros({index.size(0), patches.size(1), patches.size(2)}, patches.options());
  const at::Tensor picked = patches.index_select(0, index.clamp_max(N - 1));
  return picked.masked_fill(index.ge(N).view({-1, 1, 1}), 0.0);
}

}  // namespace magic
