#include "torch_backend/fault_bindings.h"

#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "data_plane/fault_plan.h"
#include "data_plane/reply_json.h"
#include "openreg/faults.h"
#include "torch_backend/command_phase.h"
#include "torch_backend/runtime_error.h"

namespace openreg::torch_backend {
namespace {

namespace py = pybind11;

std::vector<uint32_t> Arm(const std::string& plan_json) {
  std::vector<uint32_t> ids;
  OPENREG_CHECK(ArmFaultsFromJson(plan_json, &ids));
  return ids;
}

uint32_t Disarm(const std::vector<uint32_t>& ids) {
  uint32_t disarmed = 0;
  OPENREG_CHECK(DisarmFaults(ids, &disarmed));
  return disarmed;
}

std::string List() {
  proto::ListFaultsReply reply;
  OPENREG_CHECK(ListFaults(&reply));
  return ReplyToJson(reply);
}

std::string Log(uint64_t since) {
  proto::GetFaultLogReply reply;
  OPENREG_CHECK(GetFaultLog(since, &reply));
  return ReplyToJson(reply);
}

std::string Profile() {
  proto::GetCommandProfileReply reply;
  OPENREG_CHECK(GetCommandProfile(&reply));
  return ReplyToJson(reply);
}

}  // namespace

void RegisterFaultBindings(py::module& m) {
  m.def("_arm_faults", &Arm, py::arg("plan_json"));
  m.def("_disarm_faults", &Disarm, py::arg("ids"));
  m.def("_list_faults", &List);
  m.def("_fault_log", &Log, py::arg("since"));
  m.def("_command_profile", &Profile);
  m.def("_fault_plan_vocabulary", &faults::PlanVocabularyJson);
  m.def(
      "_reset_device",
      [](int device, bool force) {
        proto::ResetDeviceReply reply;
        OPENREG_CHECK(ResetDevice(device, force, &reply));
        return ReplyToJson(reply);
      },
      py::arg("device"), py::arg("force") = false);
  m.def("_set_in_optimizer_step", &SetInOptimizerStep, py::arg("in_step"));
}

}  // namespace openreg::torch_backend
