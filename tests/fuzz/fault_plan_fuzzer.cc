// Fault plans come from files, $OPENREG_FAULT_PLAN, openreg-ctl and any
// client of the daemon: arbitrary text must parse or be refused with
// INVALID_VALUE, validation must accept or refuse without crashing, and a
// plan that validates must arm (and disarm) in the daemon's injector. No
// input may allocate more than a small multiple of its own size.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "data_plane/error_codes.h"
#include "data_plane/fault_plan.h"
#include "device_daemon/devices/devices.h"
#include "device_daemon/faults/fault_injector.h"
#include "tests/fuzz/allocation_limit.h"
#include "tests/fuzz/fuzz_target.h"

namespace openreg::fuzz {

std::vector<std::string> Seeds() {
  return {
      R"({"faults": [{"name": "flip", "seed": 7, "daemon_wide": true,
          "corrupt_output": {"bits": [30], "element": 5},
          "trigger": {"op": "aten::mm", "nth": 3, "phase": "backward"}},
         {"kernel_failure": {"message": "boom"}, "trigger": {"every": 2}}]})",
      R"({"corruptOutput": {"bitCount": 2}, "trigger": {"op": "x"}})",
      R"({"faults": [{"corrupt_copy": {"pattern": "random", "bit_count": 3,
          "burst": true, "min_bit": 1, "max_bit": 9, "elements": 4},
          "trigger": {"kind": "copy", "probability": 0.5, "device": 1,
                      "pid": 12, "daemon_wide": false}}]})",
      R"({"faults": [{"corrupt_memory": {"bits": [0, 63], "output": 1},
          "trigger": {"after": 5, "times": 2, "stream": 3}}]})",
      R"({"faults": [{"corrupt_input": {"input": 0, "element": -1},
          "trigger": {"op": "aten::add.Tensor", "input": 1}}]})",
      R"({"faults": [{"stuck_at": {"bit": 3, "value": 1, "address": 4096,
          "bytes": 64, "word_bytes": 8}, "daemon_wide": true}]})",
      R"({"faults": [{"allocation_failure": {"message": "oom"},
          "trigger": {"kind": "allocation", "nth": 1}, "pid": 1}]})",
      R"({"faults": [{"copy_failure": {}, "trigger": {"kind": "copy"}}]})",
      R"({"faults": [{"sticky": {"error": "KERNEL_FAILURE"}}]})",
      R"({"faults": [{"device_fault": {}, "trigger": {"device": 0}}]})",
      R"({"faults": [{"device_lost": {}}, {"daemon_abort": {}},
          {"disconnect": {}}, {"corrected_error": {}}]})",
      R"({"faults": [{"hang": {"seconds": 0.5},
          "trigger": {"window_start_seconds": 1, "window_end_seconds": 2}}]})",
      R"({"faults": [{"slow": {"delay_seconds": 0.001, "factor": 2.5},
          "trigger": {"kind": "kernel", "phase": "forward"}}]})",
      R"({"faults": []})",
      R"({"faults": [{"hang": {"seconds": "soon"}}]})",
      R"({"faults": [{"corrupt_output": {"bitz": 1}}]})",
      R"({"faults": [{"trigger": {"nth": 1}}]})",
      "not json",
      "",
      "[]",
      R"({"faults": [[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]})",
  };
}

std::vector<std::string> Dictionary() {
  return {"{",
          "}",
          "[",
          "]",
          ",",
          ":",
          "\"",
          "true",
          "false",
          "null",
          "-1",
          "1e309",
          "0.5",
          "\"faults\"",
          "\"name\"",
          "\"seed\"",
          "\"trigger\"",
          "\"daemon_wide\"",
          "\"corrupt_output\"",
          "\"corrupt_copy\"",
          "\"corrupt_memory\"",
          "\"corrupt_input\"",
          "\"stuck_at\"",
          "\"kernel_failure\"",
          "\"copy_failure\"",
          "\"allocation_failure\"",
          "\"sticky\"",
          "\"device_fault\"",
          "\"device_lost\"",
          "\"daemon_abort\"",
          "\"disconnect\"",
          "\"hang\"",
          "\"slow\"",
          "\"corrected_error\"",
          "\"bits\"",
          "\"bit_count\"",
          "\"min_bit\"",
          "\"max_bit\"",
          "\"element\"",
          "\"elements\"",
          "\"pattern\"",
          "\"burst\"",
          "\"op\"",
          "\"kind\"",
          "\"phase\"",
          "\"nth\"",
          "\"after\"",
          "\"every\"",
          "\"times\"",
          "\"probability\"",
          "\"device\"",
          "\"pid\"",
          "\"stream\"",
          "\"window_start_seconds\"",
          "\"window_end_seconds\"",
          "\"seconds\"",
          "\"delay_seconds\"",
          "\"factor\"",
          "\"bit\"",
          "\"value\"",
          "\"address\"",
          "\"bytes\"",
          "\"word_bytes\"",
          "\"error\"",
          "\"message\"",
          "\"output\"",
          "\"input\""};
}

namespace {

// Fixed costs of a parse (protobuf's JSON parser, the status message) plus
// what each input byte can become: a byte of JSON turns into at most a few
// dozen bytes of messages and strings.
size_t AllocationBound(size_t input_size) {
  return (1 << 20) + 64 * input_size;
}

daemon::FaultInjector& Injector() {
  static daemon::Devices* devices =
      daemon::Devices::Create(2, 1 << 20)->release();
  static auto* injector =
      new daemon::FaultInjector(devices, /*profile_commands=*/false);
  return *injector;
}

}  // namespace

}  // namespace openreg::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace openreg;          // NOLINT(build/namespaces)
  using namespace openreg::faults;  // NOLINT(build/namespaces)
  using namespace openreg::fuzz;    // NOLINT(build/namespaces)
  daemon::FaultInjector& injector = Injector();
  const absl::string_view json(reinterpret_cast<const char*>(data), size);
  AllocationScope allocations;
  absl::StatusOr<proto::FaultPlan> plan = ParseFaultPlan(json);
  if (!plan.ok()) {
    OPENREG_FUZZ_CHECK(ErrorCodeOf(plan.status()) == proto::INVALID_VALUE,
                       plan.status().ToString());
  } else {
    for (ArmedBy armed_by : {ArmedBy::kSession, ArmedBy::kOperator}) {
      const absl::Status valid = ValidateFaultPlan(*plan, armed_by);
      OPENREG_FUZZ_CHECK(
          valid.ok() || ErrorCodeOf(valid) == proto::INVALID_VALUE,
          valid.ToString());
    }
    for (const proto::FaultSpec& spec : plan->faults()) {
      (void)ModelName(spec);
      (void)EffectiveKind(spec);
      (void)DefaultKind(spec);
    }
    // What the daemon does with a plan from openreg-ctl or --fault_plan:
    // arm only if it validates (Arm validates again), then disarm.
    absl::StatusOr<std::vector<uint32_t>> armed =
        injector.Arm(*plan, /*session=*/nullptr);
    OPENREG_FUZZ_CHECK(
        armed.ok() == ValidateFaultPlan(*plan, ArmedBy::kOperator).ok(),
        absl::StrCat("Arm and ValidateFaultPlan disagree: ",
                     armed.status().ToString()));
    if (armed.ok()) {
      OPENREG_FUZZ_CHECK(
          armed->size() == static_cast<size_t>(plan->faults_size()),
          "a plan arms all of its faults or none");
      OPENREG_FUZZ_CHECK(injector.Disarm({}, 0).ok(), "disarm all");
      OPENREG_FUZZ_CHECK(injector.List().empty(), "nothing left armed");
    }
  }
  if (AllocationsObservable()) {
    const AllocationStats stats = allocations.Stats();
    OPENREG_FUZZ_CHECK(stats.largest <= AllocationBound(size),
                       absl::StrCat("one allocation of ", stats.largest,
                                    " bytes for a ", size, "-byte plan"));
    OPENREG_FUZZ_CHECK(stats.peak_live <= AllocationBound(size),
                       absl::StrCat(stats.peak_live, " bytes live for a ", size,
                                    "-byte plan"));
  }
  return 0;
}
