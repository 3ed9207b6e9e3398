#include "device_daemon/faults/armed_fault.h"

#include "absl/strings/str_cat.h"
#include "data_plane/fault_plan.h"

namespace openreg::daemon {

ArmedFault::ArmedFault(uint32_t id, const proto::FaultSpec& spec,
                       uint64_t scope_session_id, uint64_t owner_session_id,
                       absl::Time armed_at)
    : id(id),
      spec(spec),
      model(faults::ModelName(spec)),
      name(spec.name().empty() ? absl::StrCat("fault ", id) : spec.name()),
      owner_session_id(owner_session_id),
      trigger(spec, scope_session_id, armed_at) {}

std::string ArmedFault::Describe() const {
  return absl::StrCat("injected fault '", name, "' (", model, ", fault ", id,
                      ")");
}

proto::FaultRecord NewFaultRecord(const Firing& firing,
                                  const CommandFacts& facts) {
  proto::FaultRecord record;
  record.set_fault_id(firing.fault->id);
  record.set_fault_name(firing.fault->name);
  record.set_model(firing.fault->model);
  record.set_pid(facts.pid);
  record.set_session_id(facts.session_id);
  record.set_device(facts.device);
  record.set_stream(facts.stream);
  record.set_command(CommandLabel(facts));
  record.set_phase(facts.phase);
  record.set_output(-1);
  record.set_input(-1);
  record.set_element(-1);
  record.set_match(firing.match);
  record.set_sequence(facts.sequence);
  record.set_group(facts.group);
  record.set_rank(facts.rank);
  return record;
}

}  // namespace openreg::daemon
