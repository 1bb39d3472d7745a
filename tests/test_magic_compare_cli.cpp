// magic-compare as a CI gate: exit 0 for equal dumps, 1 with the first divergence for a planted
// scale, 2 with one line for each damaged dump the acceptance names, and its JSON and JUnit
// written on every one of those exit paths.
#include <gtest/gtest.h>

#include <iostream>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "lib/trace/dump_sink.h"
#include "tests/support.h"

namespace magic {
namespace {

namespace fs = std::filesystem;

std::string folder(const std::string& name) {
  const fs::path p = fs::path(::testing::TempDir()) / "compare-cli" / name;
  fs::remove_all(p);
  return p.string();
}

at::Tensor ramp(std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return (at::arange(n, at::kDouble) * 0.37).sin().reshape(shape);
}

const std::vector<TraceRecord> kRecords = {
    {"hidden", "activation", "forward", "forward", 0, "blocks.0", {Placement::shard(0)}},
    {"w", "gradient", "backward", "first", 0, "", {Placement::partial(Placement::Reduce::kSum)}},
    {"w", "reduced_gradient", "reduction", "first", 0, "", {Placement::replicate()}}};

// A reference (single process) and a dp=2 candidate whose reduced gradient is `grad_factor` off.
void write_pair(const std::string& reference, const std::string& candidate, double grad_factor) {
  fs::remove_all(reference);  // a dump goes to a new folder
  fs::remove_all(candidate);
  const at::Tensor hidden = ramp({5, 4}), grad = ramp({3, 2});
  std::vector<DumpSink::Entry> single;
  for (size_t i = 0; i < kRecords.size(); ++i) {
    TraceRecord r = kRecords[i];
    r.placements.clear();
    single.push_back({r, i == 0 ? hidden : grad});
  }
  write_single_process_dump(reference, "reference", single);
  for (int64_t rank = 0; rank < 2; ++rank) {
    write_dump_rank_file(candidate, rank,
                         {{kRecords[0], rank == 0 ? hidden.narrow(0, 0, 3) : hidden.narrow(0, 3, 2)},
                          {kRecords[1], grad * (rank == 0 ? 0.25 : 0.75)},
                          {kRecords[2], grad * grad_factor}});
  }
  write_dump_manifest(candidate, "candidate", {{"dp", 2}}, {{0}, {1}}, kRecords);
}

struct CompareRun {
  testing::CommandOutcome outcome;
  nlohmann::json json;
  std::string junit;
};

CompareRun compare(const std::string& a, const std::string& b) {
  const std::string out = folder("reports");
  fs::create_directories(out);
  CompareRun run;
  run.outcome = testing::run_command(std::string(MAGIC_COMPARE_BINARY) + " " + a + " " + b + " --json " + out +
                                     "/r.json --junit " + out + "/r.xml");
  run.json = nlohmann::json::parse(testing::read_file(out + "/r.json"));
  run.junit = testing::read_file(out + "/r.xml");
  return run;
}

TEST(MagicCompareCli, EqualRunsPassAndAScaledGradientNamesItsFactorAndTheFirstDivergence) {
  const std::string ref = folder("ref.dump"), good = folder("good.dump"), bad = folder("bad.dump");
  write_pair(ref, good, 1.0);
  const CompareRun pass = compare(good, ref);
  EXPECT_EQ(pass.outcome.exit_code, 0) << pass.outcome.output;
  EXPECT_NE(pass.outcome.output.find("PASS: 3 of 3 records"), std::string::npos) << pass.outcome.output;
  EXPECT_TRUE(pass.json["passed"].get<bool>());
  EXPECT_TRUE(pass.json["first_divergence"].is_null());

  write_pair(ref, bad, 0.5);
  const CompareRun fail = compare(bad, ref);
  EXPECT_EQ(fail.outcome.exit_code, 1) << fail.outcome.output;
  EXPECT_NE(fail.outcome.output.find("first divergence: step 0, reduction, w reduced_gradient, 1/dp"),
            std::string::npos)
      << fail.outcome.output;
  EXPECT_EQ(fail.json["first_divergence"]["name"], "w");
  EXPECT_EQ(fail.json["first_divergence"]["kind"], "reduced_gradient");
  EXPECT_EQ(fail.json["first_divergence"]["factor"], "1/dp");
  EXPECT_NE(fail.junit.find("failures=\"1\""), std::string::npos) << fail.junit;
}

// Damage to a copy of a valid dump; returns the damaged folder.
std::string damaged(const std::string& name, const std::function<void(const fs::path&)>& damage) {
  const std::string ref = folder("base-ref.dump"), dump = folder(name);
  write_pair(ref, dump, 1.0);
  damage(dump);
  return dump;
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

void edit_manifest(const fs::path& dump, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json m = nlohmann::json::parse(testing::read_file((dump / "manifest.json").string()));
  edit(m);
  write_bytes(dump / "manifest.json", m.dump());
}

TEST(MagicCompareCli, EachDamagedDumpExitsTwoWithOneLineNamingTheProblem) {
  struct Damage {
    std::string name, expected;
    std::function<void(const fs::path&)> apply;
  };
  const std::vector<Damage> damages = {
      {"truncated file", "rank1.safetensors: not a valid safetensors file",
       [](const fs::path& d) {
         const std::string f = testing::read_file((d / "rank1.safetensors").string());
         write_bytes(d / "rank1.safetensors", f.substr(0, f.size() - 5));
       }},
      {"header length past the end", "header length",
       [](const fs::path& d) {
         std::string f = testing::read_file((d / "rank0.safetensors").string());
         const uint64_t huge = f.size() * 4;
         std::memcpy(f.data(), &huge, 8);
         write_bytes(d / "rank0.safetensors", f);
       }},
      {"overlapping offsets", "overlap",
       [](const fs::path& d) {
         const std::string f = testing::read_file((d / "rank0.safetensors").string());
         write_bytes(d / "rank0.safetensors", testing::rewrite_safetensors_header(f, [](nlohmann::json& h) {
                       h["r000002"]["data_offsets"] = h["r000001"]["data_offsets"];
                     }));
       }},
      {"wrong dtype", "is F64 but manifest.json says F32",
       [](const fs::path& d) { edit_manifest(d, [](nlohmann::json& m) { m["records"][2]["dtype"] = "F32"; }); }},
      {"NaN", "holds NaN",
       [](const fs::path& d) {
         std::string f = testing::read_file((d / "rank1.safetensors").string());
         const double nan = std::nan("");
         std::memcpy(f.data() + f.size() - 8, &nan, 8);
         write_bytes(d / "rank1.safetensors", f);
       }},
      {"manifest missing a rank", "ranks: the mesh dp=2 has 2 ranks but 1 are listed",
       [](const fs::path& d) { edit_manifest(d, [](nlohmann::json& m) { m["ranks"].erase(1); }); }},
      {"placements that do not tile", "the pieces do not tile the tensor",
       [](const fs::path& d) {
         edit_manifest(d, [](nlohmann::json& m) {
           m["records"][0]["placements"][0] = {{"type", "zigzag"}, {"dim", 1}};
         });
       }},
      {"unknown version", "version: unknown version 5 (this reader reads versions 1 to 4)",
       [](const fs::path& d) { edit_manifest(d, [](nlohmann::json& m) { m["version"] = 5; }); }},
      // 4e12 bytes of fp64 (under the manifest's own bound of 2^40 elements a record): refused from
      // the manifest, before any file is read.
      {"a record past any memory", "needs about 4.5 TiB",
       [](const fs::path& d) {
         edit_manifest(d, [](nlohmann::json& m) { m["records"][0]["shape"] = {500000, 1000000}; });
       }},
  };
  const std::string ref = folder("ref2.dump"), unused = folder("unused.dump");
  write_pair(ref, unused, 1.0);
  for (const auto& damage : damages) {
    const std::string dump = damaged("damaged.dump", damage.apply);
    const CompareRun run = compare(dump, ref);
    EXPECT_EQ(run.outcome.exit_code, 2) << damage.name << ": " << run.outcome.output;
    std::string output = run.outcome.output;
    while (!output.empty() && output.back() == '\n') output.pop_back();
    EXPECT_EQ(output.find('\n'), std::string::npos) << damage.name << ": " << run.outcome.output;
    EXPECT_EQ(output.rfind("magic-compare: error: " + dump, 0), 0u) << damage.name << ": " << output;
    EXPECT_NE(output.find(damage.expected), std::string::npos) << damage.name << ": " << output;
    std::cout << damage.name << " (exit " << run.outcome.exit_code << "): " << output << "\n";  // the figures of docs
    EXPECT_FALSE(run.json["passed"].get<bool>()) << damage.name;
    EXPECT_NE(run.json["failure"].get<std::string>().find(damage.expected), std::string::npos) << damage.name;
    EXPECT_NE(run.junit.find("<failure message="), std::string::npos) << damage.name;
  }
}

TEST(MagicCompareCli, BadFlagsAndAMixOfDumpAndScoresExitTwo) {
  const std::string ref = folder("ref3.dump"), cand = folder("cand3.dump");
  write_pair(ref, cand, 1.0);
  auto run = [](const std::string& args) {
    return testing::run_command(std::string(MAGIC_COMPARE_BINARY) + " " + args);
  };
  EXPECT_EQ(run(cand).exit_code, 2);
  EXPECT_EQ(run(cand + " " + ref + " --tolerance -1").exit_code, 2);
  EXPECT_EQ(run(cand + " " + ref + " --json /proc/no/such/dir/r.json").exit_code, 2);
  const auto mixed = run(cand + " " + ref + "/rank0.safetensors");
  EXPECT_EQ(mixed.exit_code, 2) << mixed.output;
  EXPECT_NE(mixed.output.find("is a score file but"), std::string::npos) << mixed.output;
}

}  // namespace
}  // namespace magic
