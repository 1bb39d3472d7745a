// The mesh layout the default suite runs `magic-check --bite` on through the program, with
// spawned ranks and first divergences (MagicCheckCli.MeshBiteNamesWhereEachMutationsDifferenceBegins).
// Its sizes all differ, so the gate there judges each mutation's level and factor as
// Catalog/EachMutation would; the catalog leaves those mutations to the long label.
#pragma once

#include <string>
#include <vector>

#include "checks/check_settings.h"
#include "checks/mutations.h"

namespace magic::testing {

inline constexpr const char* kMeshBiteLayout = "dp=4,cp=3,fsdp=2";
inline constexpr int kMeshBiteSteps = 3;

// The settings of that run (fp64, the tool's defaults otherwise).
inline checks::CheckSettings mesh_bite_settings() {
  checks::CheckSettings s;
  s.topology = dist::TopologySpec::parse(kMeshBiteLayout);
  s.steps = kMeshBiteSteps;
  return s;
}

// The mutations --bite runs there.
inline std::vector<std::string> mesh_bite_mutations() {
  const checks::CheckSettings s = mesh_bite_settings();
  std::vector<std::string> names;
  for (const auto& m : checks::plan_bite(s.topology, s.levels, s.precision, checks::run_traits(s)).run) {
    names.push_back(m.name);
  }
  return names;
}

}  // namespace magic::testing
