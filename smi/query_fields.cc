#include "smi/query_fields.h"

#include <cmath>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace openreg::smi {
namespace {

using proto::DeviceStats;

int64_t MiB(uint64_t bytes) { return static_cast<int64_t>(bytes >> 20); }

int64_t FaultsFired(const DeviceStats& device) {
  int64_t total = 0;
  for (const auto& [model, count] : device.faults_fired()) {
    total += static_cast<int64_t>(count);
  }
  return total;
}

// nvidia-smi's P0 (maximum performance) while the device worked during
// the utilization window, P8 (idle) otherwise: an emulated device has no
// clocks to lower, so the state only tells busy from idle.
std::string PerformanceState(const DeviceStats& device) {
  return device.utilization_percent() > 0 ? "P0" : "P8";
}

// The program, as the process named it (first word of its command line).
std::string ProcessName(const proto::SessionInfo& session) {
  std::string name(absl::StripAsciiWhitespace(session.command_line()));
  const size_t space = name.find(' ');
  if (space != std::string::npos) name.resize(space);
  return name.empty() ? session.client_name() : name;
}

const std::string& GpuName(const DaemonSnapshot& snapshot, int device) {
  static const std::string kNone = "N/A";
  for (const DeviceStats& stats : snapshot.stats.devices()) {
    if (stats.device() == device) return stats.name();
  }
  return kNone;
}

template <typename FieldT>
absl::StatusOr<std::vector<const FieldT*>> ParseFields(
    const std::string& list, const std::vector<FieldT>& table) {
  std::vector<const FieldT*> fields;
  for (absl::string_view name : absl::StrSplit(list, ',')) {
    name = absl::StripAsciiWhitespace(name);
    if (name.empty()) continue;
    const FieldT* found = nullptr;
    for (const FieldT& field : table) {
      if (name == field.name) found = &field;
    }
    if (found == nullptr) {
      std::vector<std::string> names;
      names.reserve(table.size());
      for (const FieldT& field : table) names.emplace_back(field.name);
      return absl::InvalidArgumentError(absl::StrCat(
          "Field \"", name, "\" is not a valid field to query. Valid fields: ",
          absl::StrJoin(names, ","), " (openreg-smi --help)"));
    }
    fields.push_back(found);
  }
  if (fields.empty()) {
    return absl::InvalidArgumentError("no field to query");
  }
  return fields;
}

std::string CsvText(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  return absl::StrCat("\"", absl::StrReplaceAll(text, {{"\"", "\"\""}}), "\"");
}

template <typename Row, typename FieldT>
std::string Csv(
    const DaemonSnapshot& snapshot, const std::vector<Row>& rows,
    const std::vector<const FieldT*>& fields, CsvFormat format,
    const std::function<
        const typename std::remove_pointer<Row>::type&(const Row&)>& deref) {
  std::string out;
  if (format.header) {
    std::vector<std::string> names;
    names.reserve(fields.size());
    for (const FieldT* field : fields) {
      names.push_back(format.units && field->unit[0] != '\0'
                          ? absl::StrCat(field->name, " [", field->unit, "]")
                          : std::string(field->name));
    }
    absl::StrAppend(&out, absl::StrJoin(names, ", "), "\n");
  }
  for (const Row& row : rows) {
    std::vector<std::string> values;
    for (const FieldT* field : fields) {
      const FieldValue value = field->value(snapshot, deref(row));
      if (const int64_t* number = std::get_if<int64_t>(&value)) {
        values.push_back(format.units && field->unit[0] != '\0'
                             ? absl::StrCat(*number, " ", field->unit)
                             : absl::StrCat(*number));
      } else {
        values.push_back(CsvText(std::get<std::string>(value)));
      }
    }
    absl::StrAppend(&out, absl::StrJoin(values, ", "), "\n");
  }
  return out;
}

google::protobuf::Value JsonValue(const FieldValue& value) {
  google::protobuf::Value json;
  if (const int64_t* number = std::get_if<int64_t>(&value)) {
    json.set_number_value(static_cast<double>(*number));
  } else {
    json.set_string_value(std::get<std::string>(value));
  }
  return json;
}

}  // namespace

const std::vector<GpuField>& GpuFields() {
  static const auto* const fields = new std::vector<GpuField>{
      {"timestamp", "", true, "when the daemon was asked",
       [](const DaemonSnapshot& s, const DeviceStats&) -> FieldValue {
         return SmiTimestamp(s.taken);
       }},
      {"driver_version", "", true, "the daemon's version",
       [](const DaemonSnapshot& s, const DeviceStats&) -> FieldValue {
         return s.stats.daemon_version();
       }},
      {"count", "", true, "devices of the daemon",
       [](const DaemonSnapshot& s, const DeviceStats&) -> FieldValue {
         return static_cast<int64_t>(s.stats.devices_size());
       }},
      {"index", "", true, "device index (openreg:N)",
       [](const DaemonSnapshot&, const DeviceStats& d) -> FieldValue {
         return static_cast<int64_t>(d.device());
       }},
      {"name", "", true, "device name",
       [](const DaemonSnapshot&, const DeviceStats& d) -> FieldValue {
         return d.name();
       }},
      {"pstate", "", true,
       "P0 if the device worked in the last second, else P8",
       [](const DaemonSnapshot&, const DeviceStats& d) -> FieldValue {
         return PerformanceState(d);
       }},
      {"compute_mode", "", true, "always Default (any process may attach)",
       [](const DaemonSnapshot&, const DeviceStats&) -> FieldValue {
         return std::string("Default");
       }},
      {"memory.total", "MiB", true, "device memory",
       [](const DaemonSnapshot&, const DeviceStats& d) -> FieldValue {
         return MiB(d.total_bytes());
       }},
      {"memory.used", "MiB", true, "memory allocated by every process",
       [](const DaemonSnapshot&, const DeviceStats& d) -> FieldValue {
         return MiB(d.allocated_bytes());
       }},
      {"memory.free", "MiB", true, "memory not allocated",
       [](const DaemonSnapshot&, const DeviceStats& d) -> FieldValue {
         return MiB(d.free_bytes());
       }},
      {"utilization.gpu", "%", true,
       "share of the last second during which an executor ran a stream",
       [](const DaemonSnapshot&, const DeviceStats& d) -> FieldValue {
         return static_cast<int64_t>(std::lround(d.utilization_percent()));
       }},
      {"ecc.errors.corrected.volatile.total", "", true,
       "corrected errors (injected corrected_error faults) since start",
       [](const DaemonSnapshot&, const DeviceStats& d) -> FieldValue {
         return static_cast<int64_t>(d.corrected_errors());
       }},
      {"state", "", false, "OK, FAULT (until reset) or LOST",
       [](const DaemonSnapshot&, const DeviceStats& d) -> FieldValue {
         return absl::AsciiStrToUpper(d.state());
       }},
      {"faults.fired", "", false, "injected faults fired on the device",
       [](const DaemonSnapshot&, const DeviceStats& d) -> FieldValue {
         return FaultsFired(d);
       }},
      {"streams", "", false, "streams of every process on the device",
       [](const DaemonSnapshot&, const DeviceStats& d) -> FieldValue {
         return static_cast<int64_t>(d.streams());
       }},
      {"executors", "", false, "executor threads (multiprocessors)",
       [](const DaemonSnapshot&, const DeviceStats& d) -> FieldValue {
         return static_cast<int64_t>(d.executors());
       }},
      {"kernels.executed", "", false, "kernels run since start",
       [](const DaemonSnapshot&, const DeviceStats& d) -> FieldValue {
         return static_cast<int64_t>(d.kernels_executed());
       }},
      {"copies.executed", "", false, "copies run since start",
       [](const DaemonSnapshot&, const DeviceStats& d) -> FieldValue {
         return static_cast<int64_t>(d.copies_executed());
       }},
      {"kernels.failed", "", false, "kernels that failed since start",
       [](const DaemonSnapshot&, const DeviceStats& d) -> FieldValue {
         return static_cast<int64_t>(d.kernel_failures());
       }},
      {"graphs", "", false, "captured graphs every process keeps",
       [](const DaemonSnapshot&, const DeviceStats& d) -> FieldValue {
         return static_cast<int64_t>(d.graphs());
       }},
      {"graphs.replayed", "", false, "graph replays run since start",
       [](const DaemonSnapshot&, const DeviceStats& d) -> FieldValue {
         return static_cast<int64_t>(d.graphs_replayed());
       }},
      {"graphs.launches.decoded", "", false,
       "recorded launches replays decoded (once per graph and free)",
       [](const DaemonSnapshot&, const DeviceStats& d) -> FieldValue {
         return static_cast<int64_t>(d.graph_launches_decoded());
       }},
      {"graphs.launches.reused", "", false,
       "recorded launches replays ran as decoded before",
       [](const DaemonSnapshot&, const DeviceStats& d) -> FieldValue {
         return static_cast<int64_t>(d.graph_launches_reused());
       }},
      {"graphs.launches.pointwise", "", false,
       "reused launches run as a plain loop instead of ATen",
       [](const DaemonSnapshot&, const DeviceStats& d) -> FieldValue {
         return static_cast<int64_t>(d.graph_launches_pointwise());
       }},
      {"launches.pointwise", "", false,
       "eager launches run as a plain loop instead of ATen",
       [](const DaemonSnapshot&, const DeviceStats& d) -> FieldValue {
         return static_cast<int64_t>(d.launches_pointwise());
       }},
  };
  return *fields;
}

const std::vector<AppField>& AppFields() {
  auto used_memory = [](const DaemonSnapshot&,
                        const ProcessOnDevice& p) -> FieldValue {
    return MiB(p.allocated_bytes);
  };
  static const auto* const fields = new std::vector<AppField>{
      {"timestamp", "", true, "when the daemon was asked",
       [](const DaemonSnapshot& s, const ProcessOnDevice&) -> FieldValue {
         return SmiTimestamp(s.taken);
       }},
      {"gpu_name", "", true, "name of the device",
       [](const DaemonSnapshot& s, const ProcessOnDevice& p) -> FieldValue {
         return GpuName(s, p.device);
       }},
      {"pid", "", true, "process id",
       [](const DaemonSnapshot&, const ProcessOnDevice& p) -> FieldValue {
         return static_cast<int64_t>(p.session->pid());
       }},
      {"process_name", "", true, "the program (first word of its command)",
       [](const DaemonSnapshot&, const ProcessOnDevice& p) -> FieldValue {
         return ProcessName(*p.session);
       }},
      {"used_memory", "MiB", true, "memory the process allocated on the device",
       used_memory},
      {"used_gpu_memory", "MiB", true, "the same as used_memory", used_memory},
      {"gpu_index", "", false, "device index (N/A: nothing on any device)",
       [](const DaemonSnapshot&, const ProcessOnDevice& p) -> FieldValue {
         if (p.device < 0) return std::string("N/A");
         return static_cast<int64_t>(p.device);
       }},
      {"streams", "", false, "streams the process has on the device",
       [](const DaemonSnapshot&, const ProcessOnDevice& p) -> FieldValue {
         return static_cast<int64_t>(p.streams);
       }},
      {"session_id", "", false, "the daemon's session id",
       [](const DaemonSnapshot&, const ProcessOnDevice& p) -> FieldValue {
         return static_cast<int64_t>(p.session->session_id());
       }},
      {"command_line", "", false, "the process's full command line",
       [](const DaemonSnapshot&, const ProcessOnDevice& p) -> FieldValue {
         return p.session->command_line();
       }},
  };
  return *fields;
}

absl::StatusOr<std::vector<const GpuField*>> ParseGpuFields(
    const std::string& list) {
  return ParseFields(list, GpuFields());
}

absl::StatusOr<std::vector<const AppField*>> ParseAppFields(
    const std::string& list) {
  return ParseFields(list, AppFields());
}

absl::StatusOr<CsvFormat> ParseCsvFormat(const std::string& format) {
  std::vector<std::string> parts = absl::StrSplit(format, ',');
  if (parts.empty() || absl::StripAsciiWhitespace(parts[0]) != "csv") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--format=", format, ": the only format is csv[,noheader][,nounits]"));
  }
  CsvFormat csv;
  for (size_t i = 1; i < parts.size(); ++i) {
    const absl::string_view option = absl::StripAsciiWhitespace(parts[i]);
    if (option == "noheader") {
      csv.header = false;
    } else if (option == "nounits") {
      csv.units = false;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--format: unknown option '", option, "' (noheader, nounits)"));
    }
  }
  return csv;
}

std::string GpuCsv(const DaemonSnapshot& snapshot,
                   const std::vector<const DeviceStats*>& devices,
                   const std::vector<const GpuField*>& fields,
                   CsvFormat format) {
  return Csv<const DeviceStats*, GpuField>(
      snapshot, devices, fields, format,
      [](const DeviceStats* const& d) -> const DeviceStats& { return *d; });
}

std::string AppCsv(const DaemonSnapshot& snapshot,
                   const std::vector<ProcessOnDevice>& processes,
                   const std::vector<const AppField*>& fields,
                   CsvFormat format) {
  return Csv<ProcessOnDevice, AppField>(
      snapshot, processes, fields, format,
      [](const ProcessOnDevice& p) -> const ProcessOnDevice& { return p; });
}

std::string SnapshotJson(const DaemonSnapshot& snapshot,
                         const std::vector<const DeviceStats*>& devices,
                         const std::vector<const GpuField*>& gpu_fields,
                         const std::vector<ProcessOnDevice>& processes,
                         const std::vector<const AppField*>& app_fields) {
  google::protobuf::Struct root;
  auto& top = *root.mutable_fields();
  google::protobuf::Struct daemon;
  auto& about = *daemon.mutable_fields();
  about["socket"].set_string_value(snapshot.socket);
  about["version"].set_string_value(snapshot.stats.daemon_version());
  about["pid"].set_number_value(snapshot.stats.daemon_pid());
  about["uptime_seconds"].set_number_value(snapshot.stats.uptime_seconds());
  about["utilization_window_seconds"].set_number_value(
      snapshot.stats.utilization_window_seconds());
  about["draining"].set_bool_value(snapshot.sessions.draining());
  about["timestamp"].set_string_value(SmiTimestamp(snapshot.taken));
  *top["daemon"].mutable_struct_value() = daemon;
  google::protobuf::ListValue* gpus = top["gpus"].mutable_list_value();
  for (const DeviceStats* device : devices) {
    auto& entry = *gpus->add_values()->mutable_struct_value()->mutable_fields();
    for (const GpuField* field : gpu_fields) {
      entry[field->name] = JsonValue(field->value(snapshot, *device));
    }
  }
  google::protobuf::ListValue* apps = top["processes"].mutable_list_value();
  for (const ProcessOnDevice& process : processes) {
    auto& entry = *apps->add_values()->mutable_struct_value()->mutable_fields();
    for (const AppField* field : app_fields) {
      entry[field->name] = JsonValue(field->value(snapshot, process));
    }
  }
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(root, &json, options);
  return json;
}

std::string FieldHelp() {
  auto line = [](bool from_nvidia_smi, const char* name, const char* unit,
                 const char* meaning) {
    return absl::StrFormat(
        "  %s %-36s %s\n", from_nvidia_smi ? "*" : " ",
        unit[0] != '\0' ? absl::StrCat(name, " [", unit, "]") : name, meaning);
  };
  std::string help = "Fields of --query-gpu (* also in nvidia-smi):\n";
  for (const GpuField& field : GpuFields()) {
    help += line(field.from_nvidia_smi, field.name, field.unit, field.meaning);
  }
  help += "Fields of --query-compute-apps (* also in nvidia-smi):\n";
  for (const AppField& field : AppFields()) {
    help += line(field.from_nvidia_smi, field.name, field.unit, field.meaning);
  }
  return help;
}

std::string SmiTimestamp(absl::Time time) {
  return absl::FormatTime("%Y/%m/%d %H:%M:%E3S", time, absl::LocalTimeZone());
}

}  // namespace openreg::smi
