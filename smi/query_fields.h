// The fields of `openreg-smi --query-gpu` and `--query-compute-apps`, with
// nvidia-smi's names where the fact exists here (docs/OBSERVABILITY.md
// lists them), and their CSV and JSON forms. The one table of fields: the
// CSV, the JSON and the field list in --help all come from it.
#ifndef OPENREG_SMI_QUERY_FIELDS_H_
#define OPENREG_SMI_QUERY_FIELDS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "smi/daemon_snapshot.h"

namespace openreg::smi {

// A number (printed as an integer) or a text.
using FieldValue = std::variant<int64_t, std::string>;

template <typename Row>
struct Field {
  const char* name;
  const char* unit;      // "MiB", "%", or "" (shown as "[MiB]" in CSV headers)
  bool from_nvidia_smi;  // nvidia-smi has a field of this name and meaning
  const char* meaning;
  std::function<FieldValue(const DaemonSnapshot&, const Row&)> value;
};

using GpuField = Field<proto::DeviceStats>;
using AppField = Field<ProcessOnDevice>;

const std::vector<GpuField>& GpuFields();
const std::vector<AppField>& AppFields();

// "index,name,memory.used" -> the fields, in that order. An unknown name
// is an error naming it and listing the valid ones (nvidia-smi: 'Field
// "x" is not a valid field to query.').
absl::StatusOr<std::vector<const GpuField*>> ParseGpuFields(
    const std::string& list);
absl::StatusOr<std::vector<const AppField*>> ParseAppFields(
    const std::string& list);

// --format=csv[,noheader][,nounits].
struct CsvFormat {
  bool header = true;
  bool units = true;
};
absl::StatusOr<CsvFormat> ParseCsvFormat(const std::string& format);

// The CSV table (nvidia-smi's: ", " between values, units after numbers,
// "name [unit]" in the header). A text holding a comma or a quote is
// quoted as RFC 4180 does.
std::string GpuCsv(const DaemonSnapshot& snapshot,
                   const std::vector<const proto::DeviceStats*>& devices,
                   const std::vector<const GpuField*>& fields,
                   CsvFormat format);
std::string AppCsv(const DaemonSnapshot& snapshot,
                   const std::vector<ProcessOnDevice>& processes,
                   const std::vector<const AppField*>& fields,
                   CsvFormat format);

// {"daemon": {...}, "gpus": [{field: value}], "processes": [...]}: numbers
// as JSON numbers, without units.
std::string SnapshotJson(const DaemonSnapshot& snapshot,
                         const std::vector<const proto::DeviceStats*>& devices,
                         const std::vector<const GpuField*>& gpu_fields,
                         const std::vector<ProcessOnDevice>& processes,
                         const std::vector<const AppField*>& app_fields);

// For --help: each field with its unit and meaning.
std::string FieldHelp();

// 2026/11/26 22:40:53.123, nvidia-smi's timestamp format (local time).
std::string SmiTimestamp(absl::Time time);

}  // namespace openreg::smi

#endif  // OPENREG_SMI_QUERY_FIELDS_H_
