// Every mutation of the catalog has exactly its planted variant: an object of another type than
// the correct one, of its family's kind (precision mutations: of MixedPrecision, with the correct
// layout objects; micro-batch mutations: of MicroBatches); the empty name gives the correct
// object, and a name of the other family (or none) is a programming error.
#include <gtest/gtest.h>

#include <typeinfo>

#include "checks/mutations.h"
#include "checks/planted_bridge.h"
#include "checks/planted_micro_batches.h"
#include "checks/planted_pipeline.h"
#include "checks/planted_precision.h"
#include "checks/planted_variants.h"

namespace magic {
namespace {

// A step and a query that are never run: only which object a planted wrapper hands back matters.
struct NoStep : StepFunction {
  int64_t num_steps() const override { return 0; }
  StepOutput step(const TrainState&, int64_t, const at::Tensor&, bool) const override { return {}; }
  TensorTree gradient(const TrainState&, int64_t, const at::Tensor&, bool) const override { return {}; }
};
struct NoQuery : QueryFunction {
  int64_t num_queries() const override { return 0; }
  at::Tensor loss(const TensorTree&, std::optional<int64_t>) const override { return {}; }
};

TEST(PlantedVariants, EachMutationPlantsAVariantOfItsFamilysObject) {
  const PrecisionPolicy fp16 = PrecisionPolicy::for_compute(c10::kHalf);
  for (const auto& m : checks::mutation_catalog()) {
    if (checks::is_precision_mutation(m.name)) {
      EXPECT_NE(typeid(*checks::planted_precision(m.name, fp16, 2)), typeid(MixedPrecision)) << m.name;
      const auto dp = checks::planted_data_parallel(m.name, dist::MeshParts{}, dist::Convention::kSum);
      EXPECT_EQ(typeid(*dp), typeid(dist::DataParallel)) << m.name;
      EXPECT_EQ(typeid(*checks::planted_three_pool_conventions(m.name)), typeid(dist::ThreePoolConventions));
      continue;
    }
    EXPECT_EQ(typeid(*checks::planted_precision(m.name, fp16, 2)), typeid(MixedPrecision)) << m.name;
    EXPECT_EQ(checks::is_micro_batch_mutation(m.name),
              typeid(*checks::planted_micro_batches(m.name, 2)) != typeid(MicroBatches))
        << m.name;
    if (checks::is_micro_batch_mutation(m.name)) {  // a variant of the step's micro-batching
      const auto dp = checks::planted_data_parallel(m.name, dist::MeshParts{}, dist::Convention::kSum);
      EXPECT_EQ(typeid(*dp), typeid(dist::DataParallel)) << m.name;
      continue;
    }
    if (checks::is_pipeline_mutation(m.name)) {  // a wrapper of the step or the query the run is given
      const NoStep step;
      const NoQuery query;
      const bool wrapped = checks::planted_step(m.name, step, nullptr).get() != &step ||
                           checks::planted_query(m.name, query, 2).get() != &query;
      EXPECT_TRUE(wrapped) << m.name;
      const auto dp = checks::planted_data_parallel(m.name, dist::MeshParts{}, dist::Convention::kSum);
      EXPECT_EQ(typeid(*dp), typeid(dist::DataParallel)) << m.name;
      continue;
    }
    if (checks::is_bridge_mutation(m.name)) {  // a variant of the bridge (planted_bridge.h), not of a mesh
      EXPECT_THROW(checks::planted_data_parallel(m.name, dist::MeshParts{}, dist::Convention::kSum), std::logic_error)
          << m.name;
      continue;
    }
    if (m.family == dist::TopologyFamily::kMesh) {
      const auto planted = checks::planted_data_parallel(m.name, dist::MeshParts{}, dist::Convention::kSum);
      EXPECT_NE(typeid(*planted), typeid(dist::DataParallel)) << m.name;
      EXPECT_THROW(checks::planted_three_pool_conventions(m.name), std::logic_error) << m.name;
    } else {
      const auto planted = checks::planted_three_pool_conventions(m.name);
      EXPECT_NE(typeid(*planted), typeid(dist::ThreePoolConventions)) << m.name;
      EXPECT_THROW(checks::planted_data_parallel(m.name, dist::MeshParts{}, dist::Convention::kSum), std::logic_error)
          << m.name;
    }
  }
}

TEST(PlantedVariants, NoMutationGivesTheCorrectObjects) {
  const NoStep step;
  const NoQuery query;
  EXPECT_EQ(checks::planted_step("", step, nullptr).get(), &step);
  EXPECT_EQ(checks::planted_query("", query, 2).get(), &query);
  EXPECT_EQ(typeid(*checks::planted_micro_batches("", 3)), typeid(MicroBatches));
  const auto dp = checks::planted_data_parallel("", dist::MeshParts{}, dist::Convention::kSum);
  EXPECT_EQ(typeid(*dp), typeid(dist::DataParallel));
  const auto pools = checks::planted_three_pool_conventions("");
  EXPECT_EQ(typeid(*pools), typeid(dist::ThreePoolConventions));
  EXPECT_THROW(checks::planted_data_parallel("bogus", dist::MeshParts{}, dist::Convention::kSum), std::logic_error);
}

}  // namespace
}  // namespace magic
