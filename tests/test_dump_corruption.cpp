// Dumps are untrusted input (docs/dump-format.md, "What a reader refuses"). A valid two-rank dump
// is damaged 10,000 ways at random (pinned seed): bytes flipped, files truncated, manifest fields
// deleted or given other types and values, safetensors headers rewritten with other dtypes,
// shapes and offsets, NaN written into the data. Each damaged dump must either read (a change
// the format cannot tell, like one data byte) or be refused with one InputError line naming a
// file of the dump; nothing else may escape, and a dump that reads must compare without error.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "lib/core/error.h"
#include "lib/trace/dump_comparison.h"
#include "lib/trace/dump_reader.h"
#include "lib/trace/dump_sink.h"
#include "tests/support.h"

namespace magic {
namespace {

namespace fs = std::filesystem;
using Bytes = std::string;

Bytes slurp(const fs::path& p) {
  return testing::read_file(p.string());
}

void spit(const fs::path& p, const Bytes& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The valid dump every case starts from: dp=2, an uneven shard, a replicated F32 tensor, token ids.
std::map<std::string, Bytes> base_dump(const fs::path& folder) {
  fs::remove_all(folder);
  const std::vector<TraceRecord> records = {
      {"input_ids", "input", "forward", "forward", 0, "", {Placement::shard(0)}},
      {"hidden", "activation", "forward", "forward", 0, "blocks.0", {Placement::shard(0)}},
      {"w", "reduced_gradient", "reduction", "first", 0, "", {Placement::replicate()}}};
  const at::Tensor ids = at::arange(10, at::kLong).reshape({5, 2});
  const at::Tensor hidden = at::linspace(-1, 1, 30, at::kDouble).reshape({5, 2, 3});
  const at::Tensor w = at::linspace(0, 1, 4, at::kFloat);
  for (int64_t r = 0; r < 2; ++r) {
    const int64_t begin = r == 0 ? 0 : 3, rows = r == 0 ? 3 : 2;
    write_dump_rank_file(
        folder.string(), r,
        {{records[0], ids.narrow(0, begin, rows)}, {records[1], hidden.narrow(0, begin, rows)}, {records[2], w}});
  }
  write_dump_manifest(folder.string(), "base", {{"dp", 2}}, {{0}, {1}}, records);
  std::map<std::string, Bytes> files;
  for (const auto& e : fs::directory_iterator(folder)) files[e.path().filename().string()] = slurp(e.path());
  return files;
}

// A random JSON value of a random type, to put where a field was.
nlohmann::json random_value(std::mt19937_64& rng) {
  switch (rng() % 9) {
    case 0:
      return nullptr;
    case 1:
      return "F64";
    case 2:
      return -1;
    case 3:
      return int64_t{1} << 50;
    case 4:
      return 2.5;
    case 5:
      return nlohmann::json::array({0, 1});
    case 6:
      return nlohmann::json::object();
    case 7:
      return static_cast<int64_t>(rng() % 8);
    default:
      return "zigzag";
  }
}

// Changes, deletes or adds one member somewhere inside `node`.
void mutate_json(nlohmann::json& node, std::mt19937_64& rng) {
  std::vector<nlohmann::json*> containers;
  std::function<void(nlohmann::json&)> collect = [&](nlohmann::json& n) {
    if (n.is_object() || n.is_array()) {
      containers.push_back(&n);
      for (auto& child : n) collect(child);
    }
  };
  collect(node);
  nlohmann::json& target = *containers[rng() % containers.size()];
  if (target.empty()) {
    target = random_value(rng);
    return;
  }
  const size_t index = rng() % target.size();
  if (target.is_array()) {
    if (rng() % 4 == 0) {
      target.erase(index);
    } else if (rng() % 3 == 0) {
      target.push_back(target[index]);  // a duplicate
    } else {
      target[index] = random_value(rng);
    }
    return;
  }
  auto it = target.begin();
  std::advance(it, index);
  if (rng() % 4 == 0) {
    target.erase(it);
  } else {
    it.value() = random_value(rng);
  }
}

struct Case {
  std::string kind;
  std::map<std::string, Bytes> files;
};

Case damage(const std::map<std::string, Bytes>& base, std::mt19937_64& rng) {
  Case c{"", base};
  const std::string rank_file = rng() % 2 ? "rank0.safetensors" : "rank1.safetensors";
  Bytes& manifest = c.files["manifest.json"];
  Bytes& data = c.files[rank_file];
  switch (rng() % 10) {
    case 0:
      c.kind = "manifest byte";
      manifest[rng() % manifest.size()] = static_cast<char>(rng() % 256);
      break;
    case 1:
      c.kind = "manifest truncated";
      manifest.resize(rng() % (manifest.size() - 1));  // the last byte is a newline
      break;
    case 2: {
      c.kind = "manifest field";
      nlohmann::json m = nlohmann::json::parse(manifest);
      mutate_json(m, rng);
      manifest = m.dump();
      break;
    }
    case 3:
      c.kind = "file byte";
      data[rng() % data.size()] = static_cast<char>(rng() % 256);
      break;
    case 4: {
      c.kind = "header length";
      const uint64_t length = rng() % 2 ? rng() : rng() % (data.size() + 64);
      std::memcpy(data.data(), &length, 8);
      break;
    }
    case 5:
      c.kind = "file truncated";
      data.resize(rng() % data.size());
      break;
    case 6:
      c.kind = "header field";
      data = testing::rewrite_safetensors_header(data, [&](nlohmann::json& h) { mutate_json(h, rng); });
      break;
    case 7: {
      c.kind = "offsets";
      data = testing::rewrite_safetensors_header(data, [&](nlohmann::json& h) {
        std::vector<std::string> keys;
        for (auto& item : h.items()) keys.push_back(item.key());
        auto& entry = h[keys[rng() % keys.size()]];
        if (entry.is_object() && entry.contains("data_offsets")) {
          entry["data_offsets"][rng() % 2] = static_cast<int64_t>(rng() % 160);
        }
      });
      break;
    }
    case 8: {
      c.kind = "NaN";  // into hidden's bytes (F64): somewhere in the data section
      uint64_t length = 0;
      std::memcpy(&length, data.data(), 8);
      const nlohmann::json h = nlohmann::json::parse(data.substr(8, length));
      const auto offsets = h.at("r000001").at("data_offsets");
      const uint64_t begin = 8 + length + offsets[0].get<uint64_t>();
      const uint64_t slots = (offsets[1].get<uint64_t>() - offsets[0].get<uint64_t>()) / 8;
      const double nan = std::nan("");
      std::memcpy(data.data() + begin + 8 * (rng() % slots), &nan, 8);
      break;
    }
    default:
      c.kind = "file missing";
      c.files.erase(rank_file);
      break;
  }
  return c;
}

TEST(DumpCorruption, TenThousandDamagedDumpsAreReadOrRefusedWithOneLineNamingTheFile) {
  const fs::path root = fs::path(::testing::TempDir()) / "corruption";
  const auto base = base_dump(root / "base");
  const LoadedDump reference = read_dump((root / "base").string());
  std::mt19937_64 rng(20261124);
  std::map<std::string, std::pair<int, int>> outcomes;  // kind -> (refused, read)
  int refused = 0, read = 0;
  const fs::path folder = root / "case";
  for (int i = 0; i < 10000; ++i) {
    const Case c = damage(base, rng);
    fs::remove_all(folder);
    fs::create_directories(folder);
    for (const auto& [name, bytes] : c.files) spit(folder / name, bytes);
    try {
      const LoadedDump dump = read_dump(folder.string());
      compare_dumps(dump, reference, {});
      ++read;
      ++outcomes[c.kind].second;
    } catch (const InputError& e) {
      const std::string what = e.what();
      ASSERT_EQ(what.find('\n'), std::string::npos) << "case " << i << " (" << c.kind << "): " << what;
      ASSERT_EQ(what.rfind(folder.string(), 0), 0u) << "case " << i << " (" << c.kind << ") names no file: " << what;
      ++refused;
      ++outcomes[c.kind].first;
    } catch (const std::exception& e) {
      FAIL() << "case " << i << " (" << c.kind << ") escaped as " << typeid(e).name() << ": " << e.what();
    }
  }
  std::string summary;
  for (const auto& [kind, o] : outcomes)
    summary += kind + ": " + std::to_string(o.first) + " refused, " + std::to_string(o.second) + " read\n";
  EXPECT_EQ(refused + read, 10000) << summary;
  // Every kind of damage was met, and refused at least sometimes; the structural kinds always are.
  EXPECT_EQ(outcomes.size(), 10u) << summary;
  for (const auto& [kind, o] : outcomes) EXPECT_GT(o.first, 0) << kind << "\n" << summary;
  for (const char* always : {"manifest truncated", "NaN", "file missing"}) {
    EXPECT_EQ(outcomes[always].second, 0) << always << "\n" << summary;
  }
  EXPECT_GE(refused, 6000) << summary;
  std::cout << summary;
  fs::remove_all(root);
}

}  // namespace
}  // namespace magic
