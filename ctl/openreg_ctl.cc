// openreg-ctl: talks to a running openreg-daemon's control service.
//
//   openreg-ctl [--socket=PATH] [--json] COMMAND
//     fault add PLAN_FILE | fault add --spec='JSON'
//     fault list | fault clear [ID...] | fault log [--since=N]
//     device reset N [--force]
//     profile
//     costs [start|stop|reset]
//     stats
//     flight-recorder PID [--prefix=P]
//     sessions | kill-session PID | drain [on|off] | shutdown [--force]
//     set-idle-exit SECONDS
//
// Faults armed here have no client session, so each must be daemon-wide or
// name a pid (docs/FAULT_INJECTION.md). Exit status: 0 on success, 1 when
// the daemon refused the request, 2 for a bad command line.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "command_line/help_flag.h"
#include "data_plane/error_codes.h"
#include "data_plane/fault_plan.h"
#include "data_plane/flight_recorder_settings.h"
#include "data_plane/reply_json.h"
#include "data_plane/socket_path.h"
#include "grpcpp/grpcpp.h"
#include "protos/control.grpc.pb.h"

ABSL_FLAG(std::string, socket, "",
          "The daemon's control socket (default: $OPENREG_DAEMON_SOCKET, "
          "else the default socket path).");
ABSL_FLAG(bool, json, false, "Print replies as JSON (protobuf field names).");
ABSL_FLAG(std::string, spec, "",
          "fault add: the plan or fault as JSON text instead of a file.");
ABSL_FLAG(uint64_t, since, 0, "fault log: first record index to print.");
ABSL_FLAG(std::string, prefix, "",
          "flight-recorder: write traces to PREFIX<global rank> (default: "
          "$TORCH_FR_DUMP_TEMP_FILE, else /tmp/nccl_trace_rank_).");
ABSL_FLAG(bool, force, false,
          "device reset: reset a healthy device even though sessions hold "
          "memory on it (their memory is lost); shutdown: stop even though "
          "sessions are attached (they end).");

namespace openreg::ctl {
namespace {

constexpr int kRefused = 1;
constexpr int kUsage = 2;

using Stub = proto::DeviceDaemon::Stub;

int Usage(const std::string& why) {
  std::cerr << "openreg-ctl: " << why << "\n"
            << absl::ProgramUsageMessage() << "\n";
  return kUsage;
}

// Prints the reply (as JSON with --json, else via `print`) or the refusal.
template <typename Reply, typename Print>
int Finish(const grpc::Status& transport, const Reply& reply, Print print) {
  if (transport.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
    std::cerr << "openreg-ctl: permission denied: " << transport.error_message()
              << "\n";
    return kRefused;
  }
  if (!transport.ok()) {
    std::cerr << "openreg-ctl: cannot reach the daemon: "
              << transport.error_message() << "\n";
    return kRefused;
  }
  if (reply.status().code() != proto::OK) {
    std::cerr << "openreg-ctl: " << ErrorInfo(reply.status().code()).name
              << ": " << reply.status().message() << "\n";
    return kRefused;
  }
  if (absl::GetFlag(FLAGS_json)) {
    std::cout << ReplyToJson(reply) << "\n";
  } else {
    print();
  }
  return 0;
}

int FaultAdd(Stub& stub, const std::vector<char*>& args) {
  absl::StatusOr<proto::FaultPlan> plan;
  if (!absl::GetFlag(FLAGS_spec).empty()) {
    plan = faults::ParseFaultPlan(absl::GetFlag(FLAGS_spec));
  } else if (args.size() == 1) {
    plan = faults::ReadFaultPlanFile(args[0]);
  } else {
    return Usage("fault add needs a plan file or --spec='{...}'");
  }
  if (!plan.ok()) {
    std::cerr << "openreg-ctl: " << plan.status().message() << "\n";
    return kUsage;
  }
  proto::ArmFaultsRequest request;
  *request.mutable_plan() = *plan;
  proto::ArmFaultsReply reply;
  grpc::ClientContext context;
  const grpc::Status status = stub.ArmFaults(&context, request, &reply);
  return Finish(status, reply, [&] {
    std::cout << "armed " << absl::StrJoin(reply.ids(), ", ") << "\n";
  });
}

int FaultList(Stub& stub) {
  proto::ListFaultsReply reply;
  grpc::ClientContext context;
  const grpc::Status status =
      stub.ListFaults(&context, proto::ListFaultsRequest(), &reply);
  return Finish(status, reply, [&] {
    if (reply.faults().empty()) std::cout << "no faults armed\n";
    for (const proto::ArmedFault& fault : reply.faults()) {
      std::cout << fault.id() << "  " << faults::ModelName(fault.spec())
                << "  matches " << fault.matches() << "  fired "
                << fault.fired()
                << (fault.session_id() != 0
                        ? absl::StrCat("  session ", fault.session_id())
                        : "  daemon-wide")
                << "  " << ReplyToJson(fault.spec().trigger()) << "\n";
    }
  });
}

int FaultClear(Stub& stub, const std::vector<char*>& args) {
  proto::DisarmFaultsRequest request;
  for (const char* arg : args) {
    uint32_t id = 0;
    if (!absl::SimpleAtoi(arg, &id)) {
      return Usage(absl::StrCat("fault clear: '", arg, "' is not a fault id"));
    }
    request.add_ids(id);
  }
  proto::DisarmFaultsReply reply;
  grpc::ClientContext context;
  const grpc::Status status = stub.DisarmFaults(&context, request, &reply);
  return Finish(status, reply,
                [&] { std::cout << "disarmed " << reply.disarmed() << "\n"; });
}

int FaultLog(Stub& stub) {
  proto::GetFaultLogRequest request;
  request.set_since_index(absl::GetFlag(FLAGS_since));
  proto::GetFaultLogReply reply;
  grpc::ClientContext context;
  const grpc::Status status = stub.GetFaultLog(&context, request, &reply);
  return Finish(status, reply, [&] {
    for (const proto::FaultRecord& record : reply.records()) {
      std::cout << record.index() << "  fault " << record.fault_id() << " ("
                << record.model() << ")  pid " << record.pid()
                << "  openreg:" << record.device() << " stream "
                << record.stream() << "  " << record.command() << " ["
                << faults::PlanWord(record.phase()) << "]  "
                << record.message();
      if (!record.value_before().empty()) {
        std::cout << "  element " << record.element() << " bits "
                  << absl::StrJoin(record.bits(), ",") << ": "
                  << record.value_before() << " -> " << record.value_after();
      }
      std::cout << "\n";
    }
    if (reply.dropped() != 0) {
      std::cout << reply.dropped() << " older records were dropped\n";
    }
  });
}

int DeviceReset(Stub& stub, const std::vector<char*>& args) {
  int device = -1;
  if (args.size() != 1 || !absl::SimpleAtoi(args[0], &device)) {
    return Usage("device reset needs one device index");
  }
  proto::ResetDeviceRequest request;
  request.set_device(device);
  request.set_force(absl::GetFlag(FLAGS_force));
  proto::ResetDeviceReply reply;
  grpc::ClientContext context;
  const grpc::Status status = stub.ResetDevice(&context, request, &reply);
  return Finish(status, reply, [&] {
    std::cout << "openreg:" << device << " reset";
    for (const proto::AffectedSession& affected : reply.affected()) {
      std::cout << "; session " << affected.session_id() << " (pid "
                << affected.pid() << ") lost " << affected.bytes() << " bytes";
    }
    std::cout << "\n";
  });
}

int Profile(Stub& stub) {
  proto::GetCommandProfileReply reply;
  grpc::ClientContext context;
  const grpc::Status status = stub.GetCommandProfile(
      &context, proto::GetCommandProfileRequest(), &reply);
  return Finish(status, reply, [&] {
    if (!reply.enabled()) {
      std::cout << "profiling is off (start the daemon with "
                   "--profile_commands)\n";
    }
    for (const proto::CommandCount& count : reply.counts()) {
      std::cout << "openreg:" << count.device() << "  "
                << faults::PlanWord(count.kind()) << "  " << count.op() << "  "
                << faults::PlanWord(count.phase()) << "  " << count.count()
                << "\n";
    }
  });
}

// The cost profile: microseconds per command by stage for each op, then
// each stream's and executor's counters.
int Costs(Stub& stub, const std::string& verb) {
  proto::CostProfileRequest request;
  if (verb == "start") {
    request.set_action(proto::CostProfileRequest::START);
  } else if (verb == "stop") {
    request.set_action(proto::CostProfileRequest::STOP);
  } else if (verb == "reset") {
    request.set_action(proto::CostProfileRequest::RESET);
  } else if (!verb.empty()) {
    return Usage(absl::StrCat("costs: unknown action '", verb,
                              "' (start, stop, reset, or none to read)"));
  }
  proto::CostProfileReply reply;
  grpc::ClientContext context;
  const grpc::Status status = stub.CostProfile(&context, request, &reply);
  return Finish(status, reply, [&] {
    std::cout << "cost profile " << (reply.enabled() ? "on" : "off") << ", "
              << reply.seconds() << " s counted; microseconds per command:\n"
              << "op  device  count  synchronous  read wait hook settings "
                 "decode kernel reply complete  threads  fewer\n";
    for (const proto::OpCost& op : reply.ops()) {
      const double count =
          static_cast<double>(std::max<uint64_t>(1, op.count()));
      auto us = [count](uint64_t ns) {
        return absl::StrFormat("%.2f", static_cast<double>(ns) / count / 1e3);
      };
      std::cout << op.op() << "  " << op.device() << "  " << op.count() << "  "
                << op.synchronous() << "  " << us(op.read_ns()) << " "
                << us(op.wait_ns()) << " " << us(op.hook_ns()) << " "
                << us(op.settings_ns()) << " " << us(op.decode_ns()) << " "
                << us(op.kernel_ns()) << " " << us(op.reply_ns()) << " "
                << us(op.complete_ns()) << "  " << op.kernel_threads() << "  "
                << op.fewer_threads() << "\n";
    }
    for (const proto::StreamCost& stream : reply.streams()) {
      std::cout << "stream " << stream.stream() << " of pid " << stream.pid()
                << " (openreg:" << stream.device() << "): " << stream.commands()
                << " commands, " << stream.slices() << " slices, "
                << stream.parks() << " parks, " << stream.rung_wakes()
                << " rung wakes, " << stream.periodic_wakes()
                << " periodic wakes, spun " << stream.spin_ns() / 1000
                << " us\n";
    }
    for (const proto::ExecutorCost& executor : reply.executors()) {
      std::cout << "executor " << executor.executor()
                << " of openreg:" << executor.device() << ": busy "
                << executor.busy_ns() / 1000 << " us in " << executor.slices()
                << " slices, " << executor.sleeps() << " sleeps ("
                << executor.timeouts() << " timed out), CPU "
                << executor.cpu_ns() / 1000 << " us\n";
    }
    for (const proto::ThreadGroupCost& group : reply.thread_groups()) {
      std::cout << group.role();
      if (group.device() >= 0) std::cout << " of openreg:" << group.device();
      std::cout << ": " << group.threads() << " threads, CPU "
                << group.cpu_ns() / 1000 << " us\n";
    }
  });
}

int Stats(Stub& stub) {
  proto::GetStatsReply reply;
  grpc::ClientContext context;
  const grpc::Status status =
      stub.GetStats(&context, proto::GetStatsRequest(), &reply);
  return Finish(status, reply, [&] {
    for (const proto::DeviceStats& device : reply.devices()) {
      std::cout << "openreg:" << device.device() << "  " << device.state()
                << "  allocated " << device.allocated_bytes() << " of "
                << device.total_bytes() << " bytes  kernels "
                << device.kernels_executed() << "  failures "
                << device.kernel_failures() << "  corrected errors "
                << device.corrected_errors();
      for (const auto& [model, count] : device.faults_fired()) {
        std::cout << "  " << model << " " << count;
      }
      std::cout << "\n";
    }
    std::cout << reply.sessions_size() << " sessions attached\n";
    for (const proto::CommunicatorStats& communicator : reply.communicators()) {
      std::cout << "communicator " << communicator.id() << "  "
                << communicator.size() << " ranks, timeout "
                << communicator.timeout_seconds() << " s";
      if (!communicator.aborted().empty()) {
        std::cout << "  aborted: " << communicator.aborted();
      }
      std::cout << "\n";
      for (const proto::PendingCollective& pending : communicator.pending()) {
        std::cout << "  #" << pending.number() << " " << pending.operation();
        if (pending.transfer()) {
          std::cout << " (send/recv " << pending.from_rank() << " -> "
                    << pending.to_rank() << ")";
        }
        std::cout << "  joined:";
        for (int i = 0; i < pending.joined_ranks_size(); ++i) {
          std::cout << " rank " << pending.joined_ranks(i) << " ("
                    << absl::StrFormat("%.1f", pending.joined_seconds_ago(i))
                    << " s ago)";
        }
        std::cout << "  missing: rank(s) "
                  << absl::StrJoin(pending.missing_ranks(), ", ") << "\n";
      }
    }
  });
}

// Writes the flight recorder's traces of the job of process `pid` (a
// rank's), one file per global rank, for PyTorch's analyzer.
int FlightRecorderDump(Stub& stub, const std::vector<char*>& rest) {
  int pid = 0;
  if (rest.size() != 1 || !absl::SimpleAtoi(rest[0], &pid) || pid <= 0) {
    return Usage("flight-recorder takes the pid of one of the job's ranks");
  }
  std::string prefix = absl::GetFlag(FLAGS_prefix);
  if (prefix.empty()) prefix = FlightRecorderSettingsFromEnvironment().prefix;
  proto::DumpFlightRecorderRequest request;
  request.set_pid(pid);
  proto::DumpFlightRecorderReply reply;
  grpc::ClientContext context;
  const grpc::Status status =
      stub.DumpFlightRecorder(&context, request, &reply);
  if (!status.ok() || reply.status().code() != proto::OK) {
    return Finish(status, reply, [] {});
  }
  // The traces are pickles for files, not for --json: the paths are
  // printed either way.
  int failed = 0;
  for (const proto::RankTrace& trace : reply.traces()) {
    const std::string path = absl::StrCat(prefix, trace.global_rank());
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    file.write(trace.trace().data(),
               static_cast<std::streamsize>(trace.trace().size()));
    file.close();
    if (!file) {
      std::cerr << "openreg-ctl: cannot write " << path << "\n";
      ++failed;
      continue;
    }
    std::cout << path << "\n";
  }
  return failed == 0 ? 0 : kRefused;
}

// ---- Operators: see and steer the daemon's clients.

int Sessions(Stub& stub) {
  proto::ListSessionsReply reply;
  grpc::ClientContext context;
  const grpc::Status status =
      stub.ListSessions(&context, proto::ListSessionsRequest(), &reply);
  return Finish(status, reply, [&] {
    std::cout << (reply.draining() ? "draining (new sessions refused)"
                                   : "accepting sessions")
              << "; idle exit: "
              << (reply.idle_exit_seconds() > 0
                      ? absl::StrCat(reply.idle_exit_seconds(), " s")
                      : std::string("never"))
              << "\n";
    std::cout << absl::StrFormat("%8s %8s %6s %12s %7s %10s  %s\n", "session",
                                 "pid", "uid", "memory", "streams", "commands",
                                 "command line");
    for (const proto::SessionInfo& session : reply.sessions()) {
      std::cout << absl::StrFormat(
          "%8d %8d %6d %10.1fMB %7d %10d  %s\n", session.session_id(),
          session.pid(), session.uid(),
          static_cast<double>(session.allocated_bytes()) / (1 << 20),
          session.streams(), session.commands_executed(),
          session.command_line());
    }
  });
}

int KillSession(Stub& stub, const std::vector<char*>& rest) {
  int pid = 0;
  if (rest.size() != 1 || !absl::SimpleAtoi(rest[0], &pid) || pid <= 0) {
    return Usage("kill-session takes the pid of a client process");
  }
  proto::KillSessionRequest request;
  request.set_pid(pid);
  proto::KillSessionReply reply;
  grpc::ClientContext context;
  const grpc::Status status = stub.KillSession(&context, request, &reply);
  return Finish(status, reply, [&] {
    std::cout << "ended session(s) " << absl::StrJoin(reply.ended(), ", ")
              << " of pid " << pid << "\n";
  });
}

int Drain(Stub& stub, const std::string& verb) {
  if (verb != "" && verb != "on" && verb != "off") {
    return Usage(absl::StrCat("drain: '", verb, "' is not on or off"));
  }
  proto::DrainRequest request;
  request.set_draining(verb != "off");
  proto::DrainReply reply;
  grpc::ClientContext context;
  const grpc::Status status = stub.Drain(&context, request, &reply);
  return Finish(status, reply, [&] {
    std::cout << (request.draining() ? "draining: new sessions are refused; "
                                     : "accepting new sessions; ")
              << reply.attached() << " attached\n";
  });
}

int ShutdownDaemon(Stub& stub) {
  proto::ShutdownRequest request;
  request.set_force(absl::GetFlag(FLAGS_force));
  proto::ShutdownReply reply;
  grpc::ClientContext context;
  const grpc::Status status = stub.Shutdown(&context, request, &reply);
  return Finish(status, reply, [&] {
    std::cout << "the daemon is stopping"
              << (reply.ended() > 0
                      ? absl::StrCat("; ", reply.ended(), " session(s) ended")
                      : std::string())
              << "\n";
  });
}

int SetIdleExit(Stub& stub, const std::vector<char*>& rest) {
  double seconds = 0;
  if (rest.size() != 1 || !absl::SimpleAtod(rest[0], &seconds)) {
    return Usage("set-idle-exit takes a number of seconds (0: never)");
  }
  proto::SetIdleExitRequest request;
  request.set_seconds(seconds);
  proto::SetIdleExitReply reply;
  grpc::ClientContext context;
  const grpc::Status status = stub.SetIdleExit(&context, request, &reply);
  return Finish(status, reply, [&] {
    std::cout << "idle exit: "
              << (seconds > 0 ? absl::StrCat(seconds, " s") : "never") << "\n";
  });
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Talks to a running openreg-daemon's control service.\n"
      "Usage: openreg-ctl [--socket=PATH] [--json] COMMAND\n"
      "Commands:\n"
      "  fault add PLAN_FILE | fault add --spec='JSON'   arm faults\n"
      "  fault list | fault clear [ID...]                armed faults\n"
      "  fault log [--since=N]                           faults that fired\n"
      "  device reset N [--force]                        reset device N\n"
      "  profile                                         command profile\n"
      "  costs [start|stop|reset]                        the cost profile\n"
      "  stats                                           daemon statistics\n"
      "  flight-recorder PID [--prefix=P]                traces of PID's job\n"
      "  sessions                                        attached clients\n"
      "  kill-session PID                                end PID's session\n"
      "  drain [on|off]                                  refuse new sessions\n"
      "  shutdown [--force]                              stop the daemon\n"
      "  set-idle-exit SECONDS                           exit when idle (0: "
      "never)\n"
      "Exit status: 0 on success, 1 when the daemon refused the request, 2 "
      "for a bad command line.");
  command_line::ExitIfHelpRequested(argc, argv, {"ctl/"}, std::cout);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  args.erase(args.begin());  // the program name
  if (args.empty()) return Usage("no command");
  const std::string socket = DaemonSocketPath(absl::GetFlag(FLAGS_socket));
  auto channel =
      grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials());
  std::unique_ptr<Stub> stub = proto::DeviceDaemon::NewStub(channel);
  const std::string command = args[0];
  const std::string verb = args.size() > 1 ? args[1] : "";
  const std::vector<char*> rest(
      args.begin() +
          static_cast<std::ptrdiff_t>(std::min<size_t>(2, args.size())),
      args.end());
  if (command == "fault" && verb == "add") return FaultAdd(*stub, rest);
  if (command == "fault" && verb == "list") return FaultList(*stub);
  if (command == "fault" && verb == "clear") return FaultClear(*stub, rest);
  if (command == "fault" && verb == "log") return FaultLog(*stub);
  if (command == "device" && verb == "reset") return DeviceReset(*stub, rest);
  if (command == "profile" && args.size() == 1) return Profile(*stub);
  if (command == "costs" && args.size() <= 2) return Costs(*stub, verb);
  if (command == "stats" && args.size() == 1) return Stats(*stub);
  if (command == "flight-recorder") {
    return FlightRecorderDump(*stub, {args.begin() + 1, args.end()});
  }
  const std::vector<char*> operands(args.begin() + 1, args.end());
  if (command == "sessions" && args.size() == 1) return Sessions(*stub);
  if (command == "kill-session") return KillSession(*stub, operands);
  if (command == "drain" && args.size() <= 2) return Drain(*stub, verb);
  if (command == "shutdown" && args.size() == 1) return ShutdownDaemon(*stub);
  if (command == "set-idle-exit") return SetIdleExit(*stub, operands);
  return Usage(
      absl::StrCat("unknown command '", absl::StrJoin(args, " "), "'"));
}

}  // namespace
}  // namespace openreg::ctl

int main(int argc, char** argv) { return openreg::ctl::Main(argc, argv); }
