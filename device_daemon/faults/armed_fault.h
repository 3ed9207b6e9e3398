// An armed fault: its validated spec, how errors and logs name it, and the
// trigger that counts the commands it matches. Shared (by shared_ptr)
// between the registry and the firings in flight, so a fault disarmed
// while a command it fired on still runs stays alive until that command's
// effects are done.
#ifndef OPENREG_DEVICE_DAEMON_FAULTS_ARMED_FAULT_H_
#define OPENREG_DEVICE_DAEMON_FAULTS_ARMED_FAULT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "device_daemon/faults/command_facts.h"
#include "device_daemon/faults/fault_trigger.h"
#include "protos/faults.pb.h"

namespace openreg::daemon {

struct ArmedFault {
  // `scope_session_id` != 0 limits the fault to that session's commands;
  // `owner_session_id` is the session that armed it (0: an operator).
  ArmedFault(uint32_t id, const proto::FaultSpec& spec,
             uint64_t scope_session_id, uint64_t owner_session_id,
             absl::Time armed_at);

  // "injected fault 'name' (model, fault 3)": how errors and logs name it.
  std::string Describe() const;

  const uint32_t id;
  const proto::FaultSpec spec;
  const std::string model;  // the oneof field's name: "corrupt_output"
  const std::string name;
  const uint64_t owner_session_id;
  FaultTrigger trigger;
};

// One firing of a fault: which match of its trigger fired.
struct Firing {
  std::shared_ptr<ArmedFault> fault;
  uint64_t match = 0;
};

// The log record of `firing` on `facts`, before the model fills in what
// it did (no output, input or element yet: -1).
proto::FaultRecord NewFaultRecord(const Firing& firing,
                                  const CommandFacts& facts);

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_FAULTS_ARMED_FAULT_H_
