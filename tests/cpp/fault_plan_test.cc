// Fault plans: parsing (JSON) and the semantic checks every fault passes
// before it is armed, whoever sends it.
#include "fault_injection/fault_plan.h"

#include <string>

#include "data_plane/error_codes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "protos/commands.pb.h"

namespace openreg::faults {
namespace {

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
  EXPECT_THAT(Refusal(R"({"faults": [{"corrupt_output": {},
                          "trigger": {"kind": "copy"}}]})"),
              HasSubstr("corrupt_output acts on kernel commands"));
  EXPECT_THAT(Refusal(R"({"faults": [{"allocation_failure": {},
                          "trigger": {"op": "aten::add"}}]})"),
              HasSubstr("allocation_failure acts on allocation commands"));
  EXPECT_THAT(Refusal(R"({"faults": [{"device_fault": {},
                          "trigger": {"kind": "copy", "op": "aten::add"}}]})"),
              HasSubstr("trigger.op: only kernels have an op"));
}

TEST(FaultPlanTest, AnOpImpliesKernelsAndKindsDefaultToTheModels) {
  proto::FaultSpec spec;
  spec.mutable_sticky();
  EXPECT_EQ(EffectiveKind(spec), "");
  spec.mutable_trigger()->set_op("aten::add");
  EXPECT_EQ(EffectiveKind(spec), "kernel");
  spec.mutable_copy_failure();
  spec.mutable_trigger()->clear_op();
  EXPECT_EQ(EffectiveKind(spec), "copy");
  spec.mutable_trigger()->set_kind("any");
  EXPECT_EQ(EffectiveKind(spec), "");
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

TEST(FaultPlanTest, PhasesHaveNames) {
  EXPECT_EQ(PhaseFromName("backward"), proto::PHASE_BACKWARD);
  EXPECT_EQ(PhaseName(proto::PHASE_OPTIMIZER), "optimizer");
  EXPECT_EQ(PhaseFromName("lunch"), -1);
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
