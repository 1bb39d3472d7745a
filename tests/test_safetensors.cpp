#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "lib/core/error.h"
#include "lib/io/safetensors.h"
#include "tests/support.h"

namespace magic {
namespace {

std::string temp_file(const std::string& name) {
  return ::testing::TempDir() + "/" + name;
}

TEST(Safetensors, RoundTripsEveryDtypeAndKeepsOrderAndMetadata) {
  TensorTree t;
  t.insert("z.double", at::randn({3, 2}, at::kDouble));
  t.insert("a.float", at::randn({4}, at::kFloat));
  t.insert("m.bf16", at::randn({2, 2}).to(at::kBFloat16));
  t.insert("count", at::scalar_tensor(42, at::kLong));
  t.insert("mask", at::tensor({1, 0, 1}).to(at::kBool));
  t.insert("empty", at::zeros({0, 3}, at::kFloat));
  const std::string path = temp_file("roundtrip.safetensors");
  save_safetensors(path, t, {{"note", "hello"}});
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(path).parent_path())) {
    EXPECT_EQ(e.path().string().find(path + ".partial"), std::string::npos) << e.path();
  }
  SafetensorsFile back = load_safetensors(path);
  EXPECT_EQ(back.tensors.names(), t.names());
  for (const auto& e : t) {
    EXPECT_EQ(back.tensors.at(e.name).scalar_type(), e.tensor.scalar_type()) << e.name;
    EXPECT_TRUE(at::equal(back.tensors.at(e.name), e.tensor)) << e.name;
  }
  EXPECT_EQ(back.metadata.at("note"), "hello");
  // The data section is 8-byte aligned, as Python's safetensors writes it.
  std::ifstream in(path, std::ios::binary);
  uint64_t header = 0;
  in.read(reinterpret_cast<char*>(&header), 8);
  EXPECT_EQ(header % 8, 0u);
}

TEST(Safetensors, ReadsAFileWrittenByAnIndependentPythonEncoder) {
  // Values as written by fixtures/golden/make_safetensors.py.
  SafetensorsFile f = load_safetensors(testing::source_path("fixtures/golden/python_tensors.safetensors"));
  EXPECT_EQ(f.tensors.names(), (std::vector<std::string>{"scale", "ids", "weight", "half"}));
  EXPECT_EQ(f.tensors.at("scale").dim(), 0);
  EXPECT_EQ(f.tensors.at("scale").item<double>(), 0.5);
  EXPECT_TRUE(at::equal(f.tensors.at("ids"), at::tensor({7, -8, 9}, at::kLong)));
  EXPECT_TRUE(at::equal(f.tensors.at("weight"), at::arange(1, 7, at::kFloat).view({2, 3})));
  EXPECT_TRUE(at::equal(f.tensors.at("half").to(at::kFloat), at::tensor({1.0f, -2.0f})));
  EXPECT_EQ(f.metadata.at("format"), "pt");
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

std::string with_header(const std::string& json, const std::string& data) {
  uint64_t n = json.size();
  return std::string(reinterpret_cast<const char*>(&n), 8) + json + data;
}

void expect_error(const std::string& bytes, const std::string& fragment) {
  const std::string path = temp_file("bad.safetensors");
  write_bytes(path, bytes);
  try {
    load_safetensors(path);
    ADD_FAILURE() << "no error for " << fragment;
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find(fragment), std::string::npos) << message;
  }
}

TEST(Safetensors, MalformedFilesGiveErrorsNamingTheFileAndTheDefect) {
  expect_error("abc", "shorter than");
  expect_error(with_header("{\"a\":", ""), "not JSON");
  expect_error(std::string("\xff\xff\xff\xff\x00\x00\x00\x00", 8), "exceeds the file");
  expect_error(with_header(R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})", std::string(8, '\0')),
               "outside the 8-byte data section");
  expect_error(with_header(R"({"a":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}})", std::string(1, '\0')),
               "unsupported dtype");
  expect_error(with_header(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0')),
               "holds 8 bytes");
  expect_error(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                           std::string(12, '\0')),
               "overlap");
  // An empty entry holds no bytes: at another entry's offset it overlaps nothing (a rank's empty
  // activations beside its next record).
  const std::string empty_beside = temp_file("empty-beside.safetensors");
  write_bytes(empty_beside, with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                        R"("e":{"dtype":"F32","shape":[0,3],"data_offsets":[4,4]}})",
                                        std::string(8, '\0')));
  EXPECT_EQ(load_safetensors(empty_beside).tensors.at("e").numel(), 0);
  EXPECT_THROW(load_safetensors(temp_file("does-not-exist.safetensors")), InputError);
}

}  // namespace
}  // namespace magic
