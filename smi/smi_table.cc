#include "smi/smi_table.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"

namespace openreg::smi {
namespace {

// Inner width of every line: 80 columns with the two borders.
constexpr int kWidth = 78;

std::string Line(const std::string& text) {
  std::string inner = text;
  if (static_cast<int>(inner.size()) > kWidth) {
    inner.resize(kWidth);
  } else {
    inner.append(static_cast<size_t>(kWidth) - inner.size(), ' ');
  }
  return absl::StrCat("|", inner, "|\n");
}

std::string Rule(char fill, const std::string& ends = "++") {
  return absl::StrCat(std::string(1, ends[0]),
                      std::string(static_cast<size_t>(kWidth), fill),
                      std::string(1, ends[1]), "\n");
}

// The device table's three columns: the device, its memory, its activity.
constexpr int kDeviceColumn = 37;
constexpr int kMemoryColumn = 20;
constexpr int kActivityColumn = kWidth - kDeviceColumn - kMemoryColumn - 2;

std::string DeviceLine(const std::string& device, const std::string& memory,
                       const std::string& activity) {
  return absl::StrFormat("|%-*s|%-*s|%*s|\n", kDeviceColumn, device,
                         kMemoryColumn, memory, kActivityColumn, activity);
}

std::string DeviceRule(char fill) {
  return absl::StrCat(fill == '=' ? "|" : "+", std::string(kDeviceColumn, fill),
                      "+", std::string(kMemoryColumn, fill), "+",
                      std::string(kActivityColumn, fill),
                      fill == '=' ? "|" : "+", "\n");
}

std::string MiBText(uint64_t bytes) { return absl::StrCat(bytes >> 20, "MiB"); }

std::string Uptime(double seconds) {
  const int64_t total = static_cast<int64_t>(seconds);
  return absl::StrFormat("%d:%02d:%02d", total / 3600, total / 60 % 60,
                         total % 60);
}

std::string Fit(const std::string& text, size_t width) {
  if (text.size() <= width) return text;
  return absl::StrCat(text.substr(0, width - 3), "...");
}

}  // namespace

std::string RenderTable(const DaemonSnapshot& snapshot,
                        const std::vector<int>& only) {
  const proto::GetStatsReply& stats = snapshot.stats;
  std::string out =
      absl::StrCat(absl::FormatTime("%a %b %e %H:%M:%S %Y", snapshot.taken,
                                    absl::LocalTimeZone()),
                   "\n");
  out += Rule('-');
  out += Line(
      absl::StrFormat(" OPENREG-SMI %-12s Daemon pid: %-9d Uptime: %-10s %s",
                      stats.daemon_version(), stats.daemon_pid(),
                      Uptime(stats.uptime_seconds()),
                      snapshot.sessions.draining() ? "DRAINING" : ""));
  out += Line(absl::StrCat(" Socket: ", snapshot.socket));
  out += DeviceRule('-');
  out += DeviceLine(" GPU  Name                     State", " Memory-Usage",
                    " GPU-Util  Streams ");
  out += DeviceLine("      Faults fired     Corrected", "", "Kernels ");
  out += DeviceRule('=');
  for (const proto::DeviceStats* device : snapshot.Devices(only)) {
    uint64_t faults = 0;
    for (const auto& [model, count] : device->faults_fired()) faults += count;
    out += DeviceLine(
        absl::StrFormat(" %3d  %-24s %5s", device->device(),
                        Fit(device->name(), 24),
                        absl::AsciiStrToUpper(device->state())),
        absl::StrFormat(" %7s / %8s ", MiBText(device->allocated_bytes()),
                        MiBText(device->total_bytes())),
        absl::StrFormat("%8d%%  %7d ",
                        std::lround(device->utilization_percent()),
                        device->streams()));
    out += DeviceLine(
        absl::StrFormat("      %12d  %12d", faults, device->corrected_errors()),
        "", absl::StrFormat("%d ", device->kernels_executed()));
    out += DeviceRule('-');
  }
  out += "\n";
  out += Rule('-');
  out += Line(" Processes:");
  out += Line(absl::StrFormat("  %3s  %8s  %7s  %-34s  %12s", "GPU", "PID",
                              "Streams", "Command line", "GPU Memory"));
  out += Rule('=', "||");
  const std::vector<ProcessOnDevice> processes = snapshot.Processes(only);
  if (processes.empty()) out += Line("  No running processes found");
  for (const ProcessOnDevice& process : processes) {
    out += Line(absl::StrFormat(
        "  %3s  %8d  %7d  %-34s  %12s",
        process.device < 0 ? "N/A" : absl::StrCat(process.device),
        process.session->pid(), process.streams,
        Fit(process.session->command_line(), 34),
        MiBText(process.allocated_bytes)));
  }
  out += Rule('-');
  return out;
}

std::string RenderDeviceList(const DaemonSnapshot& snapshot,
                             const std::vector<int>& only) {
  std::string out;
  for (const proto::DeviceStats* device : snapshot.Devices(only)) {
    absl::StrAppend(&out, "GPU ", device->device(), ": ", device->name(),
                    " (daemon pid ", snapshot.stats.daemon_pid(), ", socket ",
                    snapshot.socket, ")\n");
  }
  return out;
}

}  // namespace openreg::smi
