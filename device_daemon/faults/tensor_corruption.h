// The tensor corruption models: corrupt_output (what a kernel wrote),
// corrupt_input (a kernel's tensor argument just before it runs) and a
// stuck_at bit in an element of every output. Each firing picks one tensor
// and element (explicitly or from the firing's seeded generator), changes
// its bits in device memory and logs what it did, or why it did nothing.
#ifndef OPENREG_DEVICE_DAEMON_FAULTS_TENSOR_CORRUPTION_H_
#define OPENREG_DEVICE_DAEMON_FAULTS_TENSOR_CORRUPTION_H_

#include "device_daemon/execution/fault_hook.h"
#include "device_daemon/faults/armed_fault.h"
#include "device_daemon/faults/command_facts.h"
#include "device_daemon/faults/fault_log.h"

namespace openreg::daemon {

class Session;

// Corrupts one of `tensors`: what the command wrote, or (`inputs`) its
// tensor arguments before it runs. Appends the firing's record to `log`.
void CorruptTensors(const Firing& firing, const CommandFacts& facts,
                    Session& session, const WrittenTensors& tensors,
                    bool inputs, FaultLog& log);

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_FAULTS_TENSOR_CORRUPTION_H_
