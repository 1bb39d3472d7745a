// magic-run on the multimodal workload (docs/magic-run.md, "Multimodal runs"): on a fan-in and a
// fan-out bridge layout (spawned ranks, Gloo on loopback) the scores are the single process's to
// fp64 rounding; the layouts it cannot run a multimodal config on, and a bridge without one, are
// refused before any rank starts. A dump on a bridge places the encoder's records on its own grid
// (dump format version 3), and magic-compare finds it equal to the single process's.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "lib/distributed/runtime/topology.h"
#include "lib/io/safetensors.h"
#include "tests/support.h"

namespace magic {
namespace {

using testing::fresh_dir;
using testing::magic_run;

const std::string& config() {
  static const std::string path = testing::source_path("fixtures/runs/multimodal.json");
  return path;
}

TEST(MultimodalRun, ScoresOnFanInAndFanOutLayoutsEqualTheSingleProcess) {
  const std::string single = fresh_dir("mm-single");
  const auto one = magic_run("--config " + config() + " --out " + single);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const at::Tensor expected = load_safetensors(single + "/scores.safetensors").tensors.at("scores");
  for (const std::string layout :
       {"enc=tp2,dp4;lm=tp2,dp2,cp2", "enc=tp4,dp2;lm=tp1,dp4,cp2", "enc=tp2,dp4,fsdp4;lm=tp2,dp2,cp2,fsdp2"}) {
    const std::string out = fresh_dir("mm-bridge");
    const auto o = magic_run("--config " + config() + " --topology '" + layout + "' --out " + out);
    ASSERT_EQ(o.exit_code, 0) << layout << "\n" << o.output;
    EXPECT_NE(o.output.find("on " + dist::TopologySpec::parse(layout).str()), std::string::npos) << o.output;
    const at::Tensor got = load_safetensors(out + "/scores.safetensors").tensors.at("scores");
    const double error = ((got - expected).abs().max() / expected.abs().max()).item<double>();
    std::printf("  %s vs single process: relative error %.3g over %ld scores\n", layout.c_str(), error,
                static_cast<long>(expected.numel()));
    EXPECT_LE(error, 1e-10) << layout;
  }
}

TEST(MultimodalRun, ADumpOnABridgePlacesTheEncoderOnItsOwnGridAndEqualsTheSingleProcess) {
  const std::string single = fresh_dir("mm-dump-single"), bridge = fresh_dir("mm-dump-bridge");
  ASSERT_EQ(magic_run("--config " + config() + " --out " + single + "/out --dump " + single + "/dump").exit_code, 0);
  const std::string layout = "enc=tp2,dp2,fsdp2;lm=dp2,cp2";
  const auto o = magic_run("--config " + config() + " --topology '" + layout + "' --out " + bridge + "/out --dump " +
                           bridge + "/dump");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const auto manifest = nlohmann::json::parse(testing::read_file(bridge + "/dump/manifest.json"));
  EXPECT_EQ(manifest["version"], 3);
  ASSERT_TRUE(manifest["meshes"].contains("encoder"));
  size_t on_encoder = 0, encoder_records = 0;
  for (const auto& r : manifest["records"]) {
    const bool encoder = r["name"].get<std::string>().rfind("encoder.", 0) == 0;
    encoder_records += encoder;
    on_encoder += r["mesh"] == "encoder";
    EXPECT_EQ(r["mesh"] == "encoder", encoder) << r.dump();
  }
  EXPECT_GT(encoder_records, 0u);
  EXPECT_EQ(on_encoder, encoder_records);
  const auto compared =
      testing::run_command(std::string(MAGIC_COMPARE_BINARY) + " " + bridge + "/dump " + single + "/dump");
  EXPECT_EQ(compared.exit_code, 0) << compared.output;
  EXPECT_NE(compared.output.find("; encoder: "), std::string::npos) << compared.output;
}

TEST(MultimodalRun, LayoutsThatCannotRunItAreRefusedBeforeAnyRankStarts) {
  struct Case {
    std::string config, flags, message;
  };
  const std::string text_only = testing::source_path("fixtures/runs/demo.json");
  for (const Case& c : {Case{config(), "--topology dp=2", "runs its encoder and language model on a bridge layout"},
                        Case{config(), "--topology 'enc=tp2,dp2;lm=dp4' --trace-file DUMP",
                             "the live tracer (--trace-port, --trace-file) on a bridge layout (enc=tp2,dp2;lm=dp4)"},
                        Case{config(), "--topology 'enc=tp2,dp3;lm=tp3,dp2'", "neither dp divides the other"},
                        Case{text_only, "--topology 'enc=tp2,dp2;lm=dp4'", "the run has no encoder"}}) {
    const std::string out = fresh_dir("mm-refused"), dump = fresh_dir("mm-refused-dump") + "/dump";
    std::string flags = c.flags;
    if (const size_t at = flags.find("DUMP"); at != std::string::npos) flags.replace(at, 4, dump);
    const auto o = magic_run("--config " + c.config + " " + flags + " --out " + out);
    EXPECT_EQ(o.exit_code, 2) << c.flags << "\n" << o.output;
    EXPECT_NE(o.output.find(c.message), std::string::npos) << o.output;
    EXPECT_TRUE(!std::filesystem::exists(out) || std::filesystem::is_empty(out)) << c.flags;
    EXPECT_FALSE(std::filesystem::exists(dump)) << c.flags;
  }
}

}  // namespace
}  // namespace magic
