#include "lib/train/run_record.h"

#include "lib/io/atomic_file.h"
#include "lib/train/run_folder.h"

namespace magic {

nlohmann::json run_record(const RunConfig& config, const std::vector<std::string>& command, const std::string& layout) {
  nlohmann::json overrides = nlohmann::json::object();
  for (const auto& o : config.overrides) overrides[o.key] = o.value;
  nlohmann::json inputs = nlohmann::json::array();
  for (const auto& input : input_files(config)) {
    inputs.push_back({{"role", input.role}, {"path", input.path}, {"fingerprint", file_fingerprint(input.path)}});
  }
  return {{"tool", "magic-run"},    {"version", MAGIC_VERSION},
          {"command", command},     {"config_file", config.source},
          {"overrides", overrides}, {"config", config.resolved},
          {"seed", config.seed},    {"layout", layout.empty() ? nlohmann::json(nullptr) : nlohmann::json(layout)},
          {"inputs", inputs}};
}

void write_run_record(const std::string& out_dir, const nlohmann::json& record) {
  write_file_atomically(out_dir + "/run.json", record.dump(2) + "\n");
}

}  // namespace magic
