// The raw-memory corruption models: corrupt_copy (the bytes a copy or
// memset wrote, on the device or in the client's host buffer),
// corrupt_memory (memory at rest in one of the session's allocations) and
// a stuck_at bit over a device address range. Raw memory has no dtype, so
// it is corrupted per 64-bit word, the unit DRAM ECC protects; both
// corruption models share that one step (CorruptWord).
#ifndef OPENREG_DEVICE_DAEMON_FAULTS_MEMORY_CORRUPTION_H_
#define OPENREG_DEVICE_DAEMON_FAULTS_MEMORY_CORRUPTION_H_

#include "device_daemon/devices/devices.h"
#include "device_daemon/faults/armed_fault.h"
#include "device_daemon/faults/command_facts.h"
#include "device_daemon/faults/fault_log.h"
#include "protos/commands.pb.h"

namespace openreg::daemon {

class Session;

// Corrupts one word of what `command` (a copy or memset) wrote.
void CorruptCopyDestination(const Firing& firing, const CommandFacts& facts,
                            Session& session, const proto::Command& command,
                            FaultLog& log);

// Corrupts one word of one of the session's allocations on the device.
void CorruptMemoryAtRest(const Firing& firing, const CommandFacts& facts,
                         Session& session, FaultLog& log);

// Forces the stuck bit in every word of the fault's address range; logs
// only when a word changed.
void EnforceStuckRange(const Firing& firing, const CommandFacts& facts,
                       Devices& devices, FaultLog& log);

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_FAULTS_MEMORY_CORRUPTION_H_
