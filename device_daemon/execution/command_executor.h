// The single place every data-plane command passes through: validates the
// command against the session, runs it (copies, memset, events, waits,
// stream-ordered frees, op launches) and counts it per device. Stream
// workers call it; it never trusts anything in the command or the segment.
// It also refuses work for sessions with a sticky error and devices out of
// service, and gives the fault hook its turn around each command.
#ifndef OPENREG_DEVICE_DAEMON_EXECUTION_COMMAND_EXECUTOR_H_
#define OPENREG_DEVICE_DAEMON_EXECUTION_COMMAND_EXECUTOR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "device_daemon/devices/devices.h"
#include "device_daemon/execution/collective_runner.h"
#include "device_daemon/execution/command_costs.h"
#include "device_daemon/execution/fault_hook.h"
#include "device_daemon/execution/graph_store.h"
#include "device_daemon/execution/op_runner.h"
#include "device_daemon/execution/stream_context.h"
#include "device_daemon/execution/wait_budget.h"
#include "device_daemon/sessions/stream_engine.h"
#include "protos/commands.pb.h"

namespace openreg::daemon {

// A short name for error records: "copy_host_to_device", "aten::add.Tensor".
std::string CommandName(const proto::Command& command);

class CommandExecutor : public StreamEngine {
 public:
  // `devices` and `op_runner` must outlive the executor.
  CommandExecutor(Devices* devices, OpRunner* op_runner);

  // Installs `hook` (not owned; null restores the no-op hook). Meant to be
  // set before sessions exist.
  void SetFaultHook(FaultHook* hook);
  // Installs the runner of Collective commands (not owned; must outlive
  // the executor). Without one, collectives fail with NOT_SUPPORTED.
  void SetCollectiveRunner(CollectiveRunner* runner);
  // Installs the store of captured graphs (not owned; must outlive the
  // executor). Without one, ReplayGraph commands fail with INTERNAL.
  void SetGraphStore(GraphStore* store);

  // The daemon's cost profile (command_costs.h), which stream workers and
  // the op runner fill through StreamContext::timing.
  CommandCosts& costs() { return costs_; }
  // How many commands may block in waits at once (wait_budget.h).
  WaitBudget& wait_budget() { return wait_budget_; }

  // Runs `command` on the stream described by `context`. The caller
  // advances the stream's completion counter afterwards, whatever the
  // result, and records a non-OK result as the stream's error.
  absl::Status Execute(const StreamContext& context,
                       const proto::Command& command);

  // StreamEngine. Streams run as StreamWorkers on their device's
  // scheduler; AdmitAllocation refuses allocations on a device out of
  // service and gives the fault hook its turn.
  std::shared_ptr<RunningStream> StartStream(Session* session, uint32_t slot,
                                             int device) override;
  absl::Status AdmitAllocation(Session& session, int device,
                               uint64_t size) override;
  void SessionClosed(uint64_t session_id) override;

 private:
  absl::Status CopyHostToDevice(const StreamContext& context,
                                const proto::CopyHostToDevice& copy);
  absl::Status CopyDeviceToHost(const StreamContext& context,
                                const proto::CopyDeviceToHost& copy);
  absl::Status CopyDeviceToDevice(const StreamContext& context,
                                  const proto::CopyDeviceToDevice& copy);
  absl::Status Memset(const StreamContext& context, const proto::Memset& set);
  absl::Status RecordEvent(const StreamContext& context,
                           const proto::RecordEvent& record, uint64_t sequence);
  // Blocks until stream `wait.stream_slot()` has completed
  // `wait.sequence()`, in slices so that a stop request is noticed.
  absl::Status WaitStream(const StreamContext& context,
                          const proto::WaitStream& wait, uint64_t sequence);
  // Blocks until another process's interprocess event reaches the
  // position the client captured (ipc_event_wait.h).
  absl::Status WaitIpcEvent(const StreamContext& context,
                            const proto::WaitIpcEvent& wait);
  // Blocks until every rank arrived (collective_runner.h), within the wait
  // budget.
  // A failure taints the stream (stream_taints.h).
  // Execute() without the taint of a failed collective's stream.
  absl::Status ExecuteChecked(const StreamContext& context,
                              const proto::Command& command);
  absl::Status RunCollective(const StreamContext& context,
                             const proto::Collective& collective);
  // Runs the recorded commands of a graph in order, each through
  // ExecuteChecked (so the fault hook, sticky errors and the device's
  // state apply to each as to a command from the ring); the first failure
  // ends the replay with its error, naming the recorded command.
  absl::Status ReplayGraph(const StreamContext& context,
                           const proto::ReplayGraph& replay);
  absl::Status FreeMemory(const StreamContext& context,
                          const proto::FreeMemory& free, uint64_t sequence);
  absl::Status Launch(const StreamContext& context,
                      const proto::LaunchOp& launch, uint64_t sequence,
                      WrittenTensors* written);
  // Runs the entry of a compiled module (data_plane/module_abi.h) on the
  // launch's arguments, each tensor checked against the session's
  // allocations first; `written` (null when no fault hook wants it) gets
  // the tensors the launch marks written.
  absl::Status LaunchModuleKernel(const StreamContext& context,
                                  const proto::LaunchModuleKernel& launch,
                                  WrittenTensors* written);
  // Runs the command's body; `written` collects what a kernel wrote.
  absl::Status Dispatch(const StreamContext& context,
                        const proto::Command& command, WrittenTensors* written);

  Devices* const devices_;
  OpRunner* const op_runner_;
  NoFaults no_faults_;
  std::atomic<FaultHook*> fault_hook_;
  std::atomic<CollectiveRunner*> collective_runner_{nullptr};
  std::atomic<GraphStore*> graph_store_{nullptr};
  CommandCosts costs_;
  WaitBudget wait_budget_;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_EXECUTION_COMMAND_EXECUTOR_H_
