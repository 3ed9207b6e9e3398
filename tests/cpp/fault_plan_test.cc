// Fault plans: parsing (JSON) and the semantic checks every fault passes
// before it is armed, whoever sends it.
#include "data_plane/fault_plan.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "data_plane/error_codes.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "protos/commands.pb.h"

namespace openreg::faults {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

proto::FaultPlan Parse(const std::string& json) {
  absl::StatusOr<proto::FaultPlan> plan = ParseFaultPlan(json);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : proto::FaultPlan();
}

std::string Refusal(const std::string& json,
                    ArmedBy armed_by = ArmedBy::kSession) {
  absl::StatusOr<proto::FaultPlan> plan = ParseFaultPlan(json);
  if (!plan.ok()) return std::string(plan.status().message());
  absl::Status valid = ValidateFaultPlan(*plan, armed_by);
  EXPECT_EQ(ErrorCodeOf(valid), valid.ok() ? proto::OK : proto::INVALID_VALUE);
  return std::string(valid.message());
}

TEST(FaultPlanTest, APlanFileListsFaultsWithTheirModelTriggerAndSeed) {
  const proto::FaultPlan plan = Parse(R"({"faults": [
      {"name": "flip", "seed": 7,
       "corrupt_output": {"bits": [30], "element": 5},
       "trigger": {"op": "aten::mm", "nth": 3, "phase": "backward"}},
      {"kernel_failure": {"message": "boom"}, "trigger": {"every": 2}}]})");
  ASSERT_EQ(plan.faults_size(), 2);
  EXPECT_EQ(ModelName(plan.faults(0)), "corrupt_output");
  EXPECT_EQ(plan.faults(0).seed(), 7u);
  EXPECT_EQ(plan.faults(0).corrupt_output().bits(0), 30u);
  EXPECT_EQ(plan.faults(0).trigger().nth(), 3u);
  EXPECT_EQ(ModelName(plan.faults(1)), "kernel_failure");
  EXPECT_TRUE(ValidateFaultPlan(plan, ArmedBy::kSession).ok());
}

TEST(FaultPlanTest, AFileMayHoldASingleFaultAndCamelCaseNames) {
  const proto::FaultPlan plan =
      Parse(R"({"corruptOutput": {"bitCount": 2}, "trigger": {"op": "x"}})");
  ASSERT_EQ(plan.faults_size(), 1);
  EXPECT_EQ(plan.faults(0).corrupt_output().bit_count(), 2u);
}

TEST(FaultPlanTest, UnknownFieldsAndBadJsonAreNamed) {
  EXPECT_THAT(Refusal(R"({"faults": [{"corrupt_output": {"bitz": 1}}]})"),
              HasSubstr("bitz"));
  EXPECT_THAT(Refusal(R"({"faults": [{"hang": {"seconds": "soon"}}]})"),
              HasSubstr("malformed fault plan"));
  EXPECT_THAT(Refusal("not json"), HasSubstr("malformed fault plan"));
}

TEST(FaultPlanTest, SemanticErrorsNameTheFaultAndTheField) {
  EXPECT_THAT(Refusal(R"({"faults": [{"trigger": {"nth": 1}}]})"),
              HasSubstr("faults[0].model: no fault model"));
  EXPECT_THAT(
      Refusal(R"({"faults": [{"hang": {}}, {"hang": {},
                 "trigger": {"nth": 1, "every": 2}}]})"),
      HasSubstr("faults[1].trigger: set at most one of nth, after and every"));
  EXPECT_THAT(Refusal(R"({"faults": [{"corrected_error": {},
                          "trigger": {"probability": 1.5}}]})"),
              HasSubstr("trigger.probability: 1.5 is not in (0, 1]"));
  EXPECT_THAT(Refusal(R"({"faults": [{"corrected_error": {},
                          "trigger": {"phase": "sideways"}}]})"),
              HasSubstr("trigger.phase"));
  EXPECT_THAT(Refusal(R"({"faults": [{"corrected_error": {},
                          "trigger": {"window_start_seconds": 5,
                                      "window_end_seconds": 1}}]})"),
              HasSubstr("trigger.window_end_seconds"));
  EXPECT_THAT(Refusal(R"({"faults": [{"corrupt_output": {"min_bit": 9,
                                                          "max_bit": 3}}]})"),
              HasSubstr("corrupt_output.min_bit"));
  EXPECT_THAT(
      Refusal(R"({"faults": [{"corrupt_output": {"pattern": "smudge"}}]})"),
      HasSubstr("corrupt_output.pattern: \"smudge\""));
  EXPECT_THAT(Refusal(R"({"faults": [{"stuck_at": {"bit": 3, "value": 2}}]})"),
              HasSubstr("stuck_at.value"));
  EXPECT_THAT(Refusal(R"({"faults": [{"stuck_at": {"bit": 3, "value": 1,
                                            "bytes": 64}}]})"),
              HasSubstr("stuck_at.address"));
  EXPECT_THAT(Refusal(R"({"faults": [{"sticky": {"error": "bad_luck"}}]})"),
              HasSubstr("sticky.error"));
  EXPECT_THAT(Refusal(R"({"faults": [{"slow": {}}]})"),
              HasSubstr("slow: set delay_seconds and/or factor"));
  EXPECT_THAT(Refusal(R"({"faults": [{"hang": {"seconds": -1}}]})"),
              HasSubstr("hang.seconds"));
}

TEST(FaultPlanTest, ModelsRefuseTriggersOnCommandsTheyCannotAffect) {
  EXPECT_THAT(
      Refusal(R"({"faults": [{"corrupt_output": {},
                          "trigger": {"kind": "copy"}}]})"),
      HasSubstr("corrupt_output acts on kernel and collective commands"));
  EXPECT_THAT(Refusal(R"({"faults": [{"allocation_failure": {},
                          "trigger": {"op": "aten::add"}}]})"),
              HasSubstr("allocation_failure acts on allocation commands"));
  EXPECT_THAT(Refusal(R"({"faults": [{"device_fault": {},
                          "trigger": {"kind": "copy", "op": "aten::add"}}]})"),
              HasSubstr("trigger.op: only kernels and collectives have an op"));
}

TEST(FaultPlanTest, CollectivesAreNamedByKindAndFilteredByGroupRankNumber) {
  const std::string flip = R"({"faults": [{"corrupt_input": {},
      "trigger": {"kind": "collective", "op": "all_reduce", "group": "0",
                  "rank": 1, "collective_number": 3}}]})";
  EXPECT_EQ(Refusal(flip), "");
  const proto::FaultSpec spec = Parse(flip).faults(0);
  EXPECT_EQ(EffectiveOp(spec), "occl::all_reduce");
  EXPECT_EQ(CollectiveOpName(proto::REDUCE_SCATTER), "occl::reduce_scatter");
  EXPECT_EQ(Refusal(R"({"faults": [{"corrupt_output": {},
      "trigger": {"kind": "collective", "op": "occl::*reduce*"}}]})"),
            "");
  EXPECT_THAT(Refusal(R"({"faults": [{"slow": {"delay_seconds": 1},
      "trigger": {"kind": "collective", "op": "allreduce"}}]})"),
              HasSubstr("trigger.op: \"allreduce\" is not one of all_reduce, "
                        "broadcast"));
  EXPECT_THAT(Refusal(R"({"faults": [{"corrupt_output": {},
      "trigger": {"rank": 1}}]})"),
              HasSubstr("trigger.rank: only collectives have a group"));
  EXPECT_THAT(Refusal(R"({"faults": [{"kernel_failure": {},
      "trigger": {"kind": "collective"}}]})"),
              HasSubstr("kernel_failure acts on kernel commands"));
}

TEST(FaultPlanTest, AnOpImpliesKernelsAndKindsDefaultToTheModels) {
  proto::FaultSpec spec;
  spec.mutable_sticky();
  EXPECT_EQ(EffectiveKind(spec), proto::ANY);
  spec.mutable_trigger()->set_op("aten::add");
  EXPECT_EQ(EffectiveKind(spec), proto::KERNEL);
  spec.mutable_copy_failure();
  spec.mutable_trigger()->clear_op();
  EXPECT_EQ(EffectiveKind(spec), proto::COPY);
  spec.mutable_trigger()->set_kind(proto::ANY);
  EXPECT_EQ(EffectiveKind(spec), proto::ANY);
}

TEST(FaultPlanTest, FaultsWithoutASessionMustSayWhomTheyAffect) {
  const std::string unscoped = R"({"faults": [{"corrected_error": {}}]})";
  EXPECT_TRUE(Refusal(unscoped, ArmedBy::kSession).empty());
  EXPECT_THAT(Refusal(unscoped, ArmedBy::kOperator),
              HasSubstr("faults[0].daemon_wide"));
  EXPECT_TRUE(Refusal(R"({"faults": [{"corrected_error": {},
                          "daemon_wide": true}]})",
                      ArmedBy::kOperator)
                  .empty());
  EXPECT_TRUE(Refusal(R"({"faults": [{"corrected_error": {},
                          "trigger": {"pid": 42}}]})",
                      ArmedBy::kOperator)
                  .empty());
}

TEST(FaultPlanTest, PlansWriteEnumValuesInLowerCase) {
  absl::StatusOr<proto::FaultPlan> plan = ParseFaultPlan(R"({"faults": [
      {"sticky": {"error": "ecc_uncorrectable"},
       "trigger": {"kind": "kernel", "phase": "backward"}},
      {"corrupt_output": {"pattern": "random_value"}}]})");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->faults(0).sticky().error(), proto::ECC_UNCORRECTABLE);
  EXPECT_EQ(plan->faults(0).trigger().kind(), proto::KERNEL);
  EXPECT_EQ(plan->faults(0).trigger().phase(), proto::BACKWARD);
  EXPECT_EQ(plan->faults(1).corrupt_output().pattern(),
            proto::Corruption::RANDOM_VALUE);
  EXPECT_EQ(PlanWord(proto::OPTIMIZER), "optimizer");
  EXPECT_EQ(PlanWord(proto::Corruption::BIT_FLIP), "bit_flip");
}

TEST(FaultPlanTest, AnUnknownWordIsRefusedWithTheWordsTheFieldTakes) {
  EXPECT_THAT(Refusal(R"({"faults": [{"corrected_error": {},
                          "trigger": {"phase": "lunch"}}]})"),
              HasSubstr("faults[0].trigger.phase: \"lunch\" is not one of "
                        "forward, backward, optimizer"));
  EXPECT_THAT(Refusal(R"({"faults": [{"corrected_error": {},
                          "trigger": {"kind": "meal"}}]})"),
              HasSubstr("\"meal\" is not one of kernel, copy, allocation, "
                        "free, other, any"));
}

TEST(FaultPlanTest, AnEnumValueFromABinaryRequestIsChecked) {
  proto::FaultSpec spec;
  spec.mutable_corrected_error();
  spec.mutable_trigger()->set_kind(static_cast<proto::CommandKind>(42));
  EXPECT_THAT(std::string(ValidateFaultSpec(spec, ArmedBy::kSession).message()),
              HasSubstr("trigger.kind: 42 is not one of"));
  spec.mutable_trigger()->set_kind(proto::ANY);
  spec.mutable_sticky()->set_error(proto::OUT_OF_MEMORY);
  EXPECT_THAT(std::string(ValidateFaultSpec(spec, ArmedBy::kSession).message()),
              HasSubstr("sticky.error: \"out_of_memory\" is not one of "
                        "illegal_address, ecc_uncorrectable"));
}

TEST(FaultPlanTest, TheVocabularyListsEveryModelWithItsKinds) {
  google::protobuf::Struct vocabulary;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(PlanVocabularyJson(),
                                                          &vocabulary)
                  .ok());
  std::map<std::string, std::pair<std::string, std::vector<std::string>>>
      models;
  for (const google::protobuf::Value& model :
       vocabulary.fields().at("models").list_value().values()) {
    const auto& fields = model.struct_value().fields();
    std::vector<std::string> kinds;
    for (const google::protobuf::Value& kind :
         fields.at("kinds").list_value().values()) {
      kinds.push_back(kind.string_value());
    }
    models[fields.at("name").string_value()] = {
        fields.at("kind").string_value(), kinds};
  }
  using Kinds = std::vector<std::string>;
  EXPECT_EQ(models["corrupt_copy"].first, "copy");
  EXPECT_EQ(models["corrupt_copy"].second, Kinds{"copy"});
  EXPECT_EQ(models["hang"].first, "any");
  EXPECT_EQ(models["corrupt_input"].second, (Kinds{"kernel", "collective"}));
  EXPECT_EQ(
      vocabulary.fields().at("patterns").list_value().values(0).string_value(),
      "bit_flip");
}

TEST(FaultPlanTest, AMissingPlanFileIsNamed) {
  absl::StatusOr<proto::FaultPlan> plan =
      ReadFaultPlanFile("/nonexistent/plan.json");
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(std::string(plan.status().message()),
              HasSubstr("/nonexistent/plan.json"));
}

}  // namespace
}  // namespace openreg::faults
