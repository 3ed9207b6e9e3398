// openreg-smi: what the daemon's devices are doing, as nvidia-smi shows a
// GPU's: a table of devices and processes by default, CSV queries with
// nvidia-smi's field names, -L, JSON, and a loop. It reads the control
// service without a session (no device memory, no streams) and starts in
// milliseconds (no libtorch). The Prometheus exporter
// (`openreg-smi --prometheus-port N`) is the Python console script's
// (torch_openreg/smi_exporter.py), which reads this program's --json.
//
// Exit status, as nvidia-smi's: 0 success, 2 bad command line, 6 no such
// device, 9 no daemon to talk to (nvidia-smi: no driver), 1 the daemon
// refused.
#include <signal.h>

#include <cstdio>
#include <ctime>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "command_line/help_flag.h"
#include "data_plane/socket_path.h"
#include "grpcpp/grpcpp.h"
#include "protos/control.grpc.pb.h"
#include "smi/daemon_snapshot.h"
#include "smi/query_fields.h"
#include "smi/smi_table.h"

ABSL_FLAG(std::string, socket, "",
          "The daemon's control socket (default: $OPENREG_DAEMON_SOCKET, "
          "else the default socket path).");
ABSL_FLAG(std::string, query_gpu, "",
          "--query-gpu=FIELDS: one CSV line per device with these fields "
          "(see the list below).");
ABSL_FLAG(std::string, query_compute_apps, "",
          "--query-compute-apps=FIELDS: one CSV line per process and device.");
ABSL_FLAG(std::string, format, "csv",
          "With a query: csv[,noheader][,nounits].");
ABSL_FLAG(bool, L, false, "-L: list the devices, one line each.");
ABSL_FLAG(bool, json, false,
          "Everything (or the queried fields) as one JSON document.");
ABSL_FLAG(double, l, 0,
          "-l SECONDS: repeat every SECONDS until interrupted (SIGINT or "
          "SIGTERM, exit status 0).");
ABSL_FLAG(int64_t, loop_ms, 0,
          "--loop-ms=MS: repeat every MS milliseconds until interrupted.");
ABSL_FLAG(std::string, i, "",
          "-i DEVICE[,DEVICE...]: only these devices (--id=...).");
ABSL_FLAG(std::string, id, "", "The same as -i.");
ABSL_FLAG(double, timeout, 5, "Seconds to wait for the daemon's answer.");

namespace openreg::smi {
namespace {

constexpr int kRefused = 1;
constexpr int kUsage = 2;
constexpr int kNoSuchDevice = 6;
constexpr int kNoDaemon = 9;

int Usage(absl::string_view why) {
  std::cerr << "openreg-smi: " << why << "\n"
            << "Run openreg-smi --help for the options and fields.\n";
  return kUsage;
}

// nvidia-smi spells its long options with dashes; absl flags cannot.
std::vector<std::string> DashesToUnderscores(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (size_t index = 1; index < args.size(); ++index) {
    std::string& arg = args[index];
    for (const char* name :
         {"query-gpu", "query-compute-apps", "loop-ms", "prometheus-port"}) {
      const std::string dashed = absl::StrCat("--", name);
      if (arg == dashed || absl::StartsWith(arg, dashed + "=")) {
        std::string underscored(name);
        for (char& c : underscored) c = c == '-' ? '_' : c;
        arg.replace(2, underscored.size(), underscored);
      }
    }
  }
  return args;
}

absl::StatusOr<std::vector<int>> ParseDevices(const std::string& list) {
  std::vector<int> devices;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    int device = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &device) ||
        device < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("-i: '", part, "' is not a device index"));
    }
    devices.push_back(device);
  }
  return devices;
}

struct View {
  std::vector<int> only;
  std::vector<const GpuField*> gpu_fields;
  std::vector<const AppField*> app_fields;
  CsvFormat csv;
  bool query_gpu = false;
  bool query_apps = false;
};

// One look: prints the view; returns the exit status.
int ShowOnce(proto::DeviceDaemon::Stub& stub, const std::string& socket,
             const View& view) {
  absl::StatusOr<DaemonSnapshot> snapshot = TakeDaemonSnapshot(
      stub, socket, absl::Seconds(absl::GetFlag(FLAGS_timeout)));
  if (!snapshot.ok()) {
    std::cerr << "openreg-smi has failed because it "
              << snapshot.status().message() << "\n";
    return absl::IsUnavailable(snapshot.status()) ? kNoDaemon : kRefused;
  }
  for (int device : view.only) {
    if (device >= snapshot->stats.devices_size()) {
      std::cerr << "openreg-smi: no device " << device << ": the daemon has "
                << snapshot->stats.devices_size() << " (0-"
                << snapshot->stats.devices_size() - 1 << ")\n";
      return kNoSuchDevice;
    }
  }
  const std::vector<const proto::DeviceStats*> devices =
      snapshot->Devices(view.only);
  const std::vector<ProcessOnDevice> processes = snapshot->Processes(view.only);
  std::string out;
  if (absl::GetFlag(FLAGS_json)) {
    const bool both = !view.query_gpu && !view.query_apps;
    out = SnapshotJson(
        *snapshot, devices,
        view.query_gpu || both ? view.gpu_fields
                               : std::vector<const GpuField*>{},
        view.query_apps || both ? processes : std::vector<ProcessOnDevice>{},
        view.app_fields);
    out += "\n";
  } else if (absl::GetFlag(FLAGS_L)) {
    out = RenderDeviceList(*snapshot, view.only);
  } else if (view.query_gpu) {
    out = GpuCsv(*snapshot, devices, view.gpu_fields, view.csv);
  } else if (view.query_apps) {
    out = AppCsv(*snapshot, processes, view.app_fields, view.csv);
  } else {
    out = RenderTable(*snapshot, view.only);
  }
  std::cout << out << std::flush;
  return 0;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(absl::StrCat(
      "Shows what a running openreg-daemon's devices are doing, as "
      "nvidia-smi does for GPUs.\n"
      "Usage: openreg-smi [--socket=PATH] [-i DEVICE] [-l SECONDS | "
      "--loop-ms=MS]\n"
      "         [ -L | --json | --query-gpu=FIELDS | "
      "--query-compute-apps=FIELDS [--format=csv[,noheader][,nounits]] ]\n"
      "       openreg-smi --prometheus-port=PORT   (console script: a "
      "Prometheus exporter)\n",
      FieldHelp(),
      "Exit status: 0 success, 1 the daemon refused, 2 bad command line, 6 "
      "no such device, 9 no daemon at the socket."));
  command_line::ExitIfHelpRequested(argc, argv, {"smi/"}, std::cout);
  std::vector<std::string> args = DashesToUnderscores(argc, argv);
  std::vector<char*> arg_pointers;
  arg_pointers.reserve(args.size());
  for (std::string& arg : args) arg_pointers.push_back(arg.data());
  std::vector<char*> rest = absl::ParseCommandLine(
      static_cast<int>(arg_pointers.size()), arg_pointers.data());
  if (rest.size() > 1) return Usage(absl::StrCat("unexpected '", rest[1], "'"));

  View view;
  const std::string ids = absl::GetFlag(FLAGS_i).empty()
                              ? absl::GetFlag(FLAGS_id)
                              : absl::GetFlag(FLAGS_i);
  absl::StatusOr<std::vector<int>> only = ParseDevices(ids);
  if (!only.ok()) return Usage(only.status().message());
  view.only = *only;
  view.query_gpu = !absl::GetFlag(FLAGS_query_gpu).empty();
  view.query_apps = !absl::GetFlag(FLAGS_query_compute_apps).empty();
  if (view.query_gpu && view.query_apps) {
    return Usage("--query-gpu and --query-compute-apps: one at a time");
  }
  std::vector<std::string> all_gpu, all_apps;
  all_gpu.reserve(GpuFields().size());
  all_apps.reserve(AppFields().size());
  for (const GpuField& field : GpuFields()) all_gpu.emplace_back(field.name);
  for (const AppField& field : AppFields()) all_apps.emplace_back(field.name);
  absl::StatusOr<std::vector<const GpuField*>> gpu_fields =
      ParseGpuFields(view.query_gpu ? absl::GetFlag(FLAGS_query_gpu)
                                    : absl::StrJoin(all_gpu, ","));
  if (!gpu_fields.ok()) return Usage(gpu_fields.status().message());
  absl::StatusOr<std::vector<const AppField*>> app_fields =
      ParseAppFields(view.query_apps ? absl::GetFlag(FLAGS_query_compute_apps)
                                     : absl::StrJoin(all_apps, ","));
  if (!app_fields.ok()) return Usage(app_fields.status().message());
  view.gpu_fields = *gpu_fields;
  view.app_fields = *app_fields;
  absl::StatusOr<CsvFormat> csv = ParseCsvFormat(absl::GetFlag(FLAGS_format));
  if (!csv.ok()) return Usage(csv.status().message());
  view.csv = *csv;

  absl::Duration period = absl::ZeroDuration();
  if (absl::GetFlag(FLAGS_l) < 0 || absl::GetFlag(FLAGS_loop_ms) < 0) {
    return Usage("-l and --loop-ms take a positive period");
  }
  if (absl::GetFlag(FLAGS_l) > 0) {
    period = absl::Seconds(absl::GetFlag(FLAGS_l));
  }
  if (absl::GetFlag(FLAGS_loop_ms) > 0) {
    period = absl::Milliseconds(absl::GetFlag(FLAGS_loop_ms));
  }

  // A loop ends on SIGINT or SIGTERM, between two looks: the signals are
  // blocked before gRPC starts its threads (which inherit the mask, so
  // none of them takes the default action) and waited for as the timer.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  if (period > absl::ZeroDuration()) {
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  }
  const std::string socket = DaemonSocketPath(absl::GetFlag(FLAGS_socket));
  auto channel =
      grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials());
  std::unique_ptr<proto::DeviceDaemon::Stub> stub =
      proto::DeviceDaemon::NewStub(channel);
  if (period == absl::ZeroDuration()) return ShowOnce(*stub, socket, view);

  while (true) {
    const int status = ShowOnce(*stub, socket, view);
    if (status != 0) return status;
    const timespec wait = absl::ToTimespec(period);
    if (sigtimedwait(&stop_signals, nullptr, &wait) >= 0) return 0;
  }
}

}  // namespace
}  // namespace openreg::smi

int main(int argc, char** argv) { return openreg::smi::Main(argc, argv); }
