// The multimodal workload's data and model seams (docs/magic-run.md, "Multimodal runs"): each
// example gets its document's patch features and P prefix columns that carry no label; a patch
// file that lacks a document, or holds a wrong shape or a non-finite value, is refused naming the
// file and the document; the config's rules; the prefix columns lead every cp layout.
#include <gtest/gtest.h>

#include <filesystem>

#include "lib/core/strings.h"
#include "lib/data/patch_features.h"
#include "lib/distributed/parallel/context_parallel.h"
#include "lib/io/safetensors.h"
#include "lib/model/lm_loss.h"
#include "lib/step/prefix_encoder.h"
#include "lib/train/run_config.h"
#include "tests/support.h"

namespace magic {
namespace {

nlohmann::json multimodal_json() {
  return nlohmann::json::parse(testing::read_file(testing::source_path("fixtures/runs/multimodal.json")));
}

RunConfig multimodal_config(const nlohmann::json& json) {
  return RunConfig::from_json(json, "multimodal", testing::source_path("fixtures/runs"));
}

TEST(PatchFeatures, EveryExampleGetsItsDocumentsPatchesAndThePrefixColumnsCarryNoLabel) {
  const LmProblem p = build_lm_problem(multimodal_config(multimodal_json()));
  const SafetensorsFile file = load_safetensors(testing::source_path("fixtures/multimodal/patches.safetensors"));
  for (const TokenDataset* data : {p.train.get(), &p.query->queries()}) {
    ASSERT_TRUE(data->patches.defined());
    EXPECT_EQ(data->patches.sizes(), (std::vector<int64_t>{data->size(), 8, 8}));
    EXPECT_EQ(data->max_len(), 40);  // model.max_len: 8 patches, then 32 tokens of text
    EXPECT_TRUE(data->input_ids.narrow(1, 0, 8).eq(data->pad_id).all().item<bool>());
    EXPECT_TRUE(data->labels.narrow(1, 0, 8).eq(kIgnoreLabel).all().item<bool>());
    const auto& documents = data == p.train.get() ? p.train_documents : p.query_documents;
    for (int64_t i = 0; i < data->size(); ++i) {
      const std::string& id = documents.at(data->examples[i].document).id;
      EXPECT_TRUE(at::equal(data->patches[i], file.tensors.at(id).to(at::kDouble))) << id;
    }
  }
  // The text after the prefix is the text-only run's, token for token.
  nlohmann::json text_only = multimodal_json();
  text_only.erase("encoder");
  text_only["data"].erase("patches");
  text_only["model"]["max_len"] = 32;
  const LmProblem t = build_lm_problem(multimodal_config(text_only));
  EXPECT_TRUE(at::equal(p.train->input_ids.narrow(1, 8, 32), t.train->input_ids));
  // The parameters: the GPT's, then the encoder's.
  EXPECT_EQ(p.initial.params.size(), t.initial.params.size() + 6);
  EXPECT_EQ((std::prev(p.initial.params.end()))->name, "encoder.proj.bias");
}

TEST(PatchFeatures, AMissingMisshapenOrNonFiniteEntryIsRefusedNamingTheFileAndTheDocument) {
  const std::string path = ::testing::TempDir() + "/patches.safetensors";
  const std::vector<TextDocument> documents{{"a", "hello"}, {"b", "world"}};
  const TokenDataset data = tokenize_documents(documents, ByteTokenizer(), 8);
  auto refusal = [&](const TensorTree& tensors) {
    save_safetensors(path, tensors);
    return testing::input_error_of([&] { load_patch_features(path, documents, data, 2, 3); });
  };
  TensorTree good;
  good.insert("a", at::ones({2, 3}));
  good.insert("b", at::ones({2, 3}));
  save_safetensors(path, good);
  const at::Tensor loaded = load_patch_features(path, documents, data, 2, 3);
  EXPECT_EQ(loaded.sizes(), (std::vector<int64_t>{2, 2, 3}));
  // A batch's rows, the padding row (index N) all zeros.
  const at::Tensor rows = patches_of_rows(loaded * at::arange(1, 3, at::kDouble).view({2, 1, 1}), {1, 2, 0});
  EXPECT_TRUE(at::equal(rows[0], at::full({2, 3}, 2.0, at::kDouble)));
  EXPECT_TRUE(at::equal(rows[1], at::zeros({2, 3}, at::kDouble)));
  EXPECT_TRUE(at::equal(rows[2], at::ones({2, 3}, at::kDouble)));
  TensorTree missing;
  missing.insert("a", at::ones({2, 3}));
  EXPECT_NE(refusal(missing).find(path + ": no patch features for document 'b'"), std::string::npos);
  TensorTree misshapen = missing;
  misshapen.insert("b", at::ones({3, 2}));
  EXPECT_NE(refusal(misshapen).find("document 'b': patch features shaped [3, 2], expected [2, 3]"), std::string::npos);
  TensorTree infinite = missing;
  infinite.insert("b", at::full({2, 3}, std::numeric_limits<double>::infinity()));
  EXPECT_NE(refusal(infinite).find("document 'b': patch features must be finite floats"), std::string::npos);
  std::filesystem::remove(path);
}

TEST(PatchFeatures, TheConfigNeedsAnEncoderForPatchesAndRoomForThePrefix) {
  nlohmann::json no_encoder = multimodal_json();
  no_encoder.erase("encoder");
  EXPECT_NE(testing::input_error_of([&] {
              multimodal_config(no_encoder);
            }).find("data.patches: patch features need an \"encoder\" section"),
            std::string::npos);
  nlohmann::json short_model = multimodal_json();
  short_model["model"]["max_len"] = 5;
  EXPECT_NE(testing::input_error_of([&] {
              multimodal_config(short_model);
            }).find("model.max_len: expected >= encoder.patches + 2 = 10"),
            std::string::npos);
  nlohmann::json zero = multimodal_json();
  zero["encoder"]["hidden"] = 0;
  EXPECT_NE(testing::input_error_of([&] { multimodal_config(zero); }).find("encoder.hidden: expected an integer >= 1"),
            std::string::npos);
}

// prefix_columns takes the leading run of a layout's columns below P: on every zig-zag chunk
// pair that is exactly the columns below P (written out here as a filter), and a layout whose
// columns below P do not lead is refused.
TEST(PrefixColumns, TheColumnsBelowThePrefixLeadEveryZigzagChunkPair) {
  int64_t layouts = 0;
  for (int64_t cp : {1, 2, 3, 4}) {
    const int64_t padded = dist::cp_padded_length(20, cp);
    for (int64_t r = 0; r < cp; ++r) {
      const at::Tensor columns = cp == 1 ? at::arange(padded) : dist::zigzag_columns(padded, cp, r);
      for (int64_t P = 0; P <= padded; ++P) {
        EXPECT_TRUE(at::equal(prefix_columns(columns, P), columns.masked_select(columns.lt(P))))
            << "cp " << cp << " rank " << r << " P " << P;
        ++layouts;
      }
    }
  }
  EXPECT_GE(layouts, 200);
  EXPECT_THROW(prefix_columns(at::tensor({5, 1, 2}, at::kLong), 3), std::logic_error);
}

}  // namespace
}  // namespace magic
