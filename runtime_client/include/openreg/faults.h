// Fault injection from a client (docs/FAULT_INJECTION.md): arm faults in
// this process's session, read what fired, reset a faulted device, read
// the daemon's command profile. Kept apart from runtime.h because it
// exposes the protobuf types of protos/faults.proto.
//
// Faults armed here affect only this session unless their spec sets
// daemon_wide. $OPENREG_FAULT_PLAN (a plan file) is armed the same way
// when the session attaches; a bad plan fails the attach, arming nothing.
#ifndef OPENREG_RUNTIME_CLIENT_INCLUDE_OPENREG_FAULTS_H_
#define OPENREG_RUNTIME_CLIENT_INCLUDE_OPENREG_FAULTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "openreg/runtime.h"
#include "protos/control.pb.h"
#include "protos/faults.pb.h"

namespace openreg {

// Validates and arms every fault of `plan` (all or none); `ids` receives
// their ids. kInvalidValue names the bad field.
Error ArmFaults(const proto::FaultPlan& plan, std::vector<uint32_t>* ids);
// The same from a plan's JSON text (a plan file's contents).
Error ArmFaultsFromJson(const std::string& json, std::vector<uint32_t>* ids);
// Disarms this session's faults `ids` (all of them when empty).
Error DisarmFaults(const std::vector<uint32_t>& ids, uint32_t* disarmed);
// Every fault armed in the daemon (all sessions).
Error ListFaults(proto::ListFaultsReply* reply);
// The daemon's fault log from record `since_index` on.
Error GetFaultLog(uint64_t since_index, proto::GetFaultLogReply* reply);
// Brings `device` back from the FAULT or lost state (its memory is lost).
// A healthy device on which sessions hold memory is refused
// (kInvalidValue naming them) unless `force`. `reply` (may be null) gets
// the sessions whose memory the reset lost.
Error ResetDevice(int device, bool force = false,
                  proto::ResetDeviceReply* reply = nullptr);
Error GetCommandProfile(proto::GetCommandProfileReply* reply);

// The phase stamped on the commands this thread submits from now on
// (proto::CommandPhase): set by the framework integration from its
// autograd state, read by fault triggers and the command profile.
void SetCommandPhase(int phase);

}  // namespace openreg

#endif  // OPENREG_RUNTIME_CLIENT_INCLUDE_OPENREG_FAULTS_H_
