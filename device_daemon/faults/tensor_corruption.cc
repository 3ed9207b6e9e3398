#include "device_daemon/faults/tensor_corruption.h"

#include <algorithm>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data_plane/dtype.h"
#include "device_daemon/faults/corruption.h"
#include "device_daemon/sessions/session.h"

namespace openreg::daemon {

void CorruptTensors(const Firing& firing, const CommandFacts& facts,
                    Session& session, const WrittenTensors& tensors,
                    bool inputs, FaultLog& log) {
  const ArmedFault& fault = *firing.fault;
  proto::FaultRecord record = NewFaultRecord(firing, facts);
  const bool stuck = fault.spec.has_stuck_at();
  const proto::Corruption& corruption =
      inputs ? fault.spec.corrupt_input() : fault.spec.corrupt_output();
  const char* role = inputs ? "input" : "output";
  if (tensors.empty()) {
    record.set_message(absl::StrCat("nothing to corrupt: the command has no ",
                                    role, " tensor"));
    log.Append(std::move(record));
    return;
  }
  std::mt19937_64 rng = FiringRng(fault.spec.seed(), firing.match, 1);
  const proto::Trigger& trigger = fault.spec.trigger();
  int index;
  if (!stuck && (inputs ? corruption.has_input() : corruption.has_output())) {
    index = static_cast<int>(inputs ? corruption.input() : corruption.output());
  } else if (inputs ? trigger.has_input() : trigger.has_output()) {
    index = static_cast<int>(inputs ? trigger.input() : trigger.output());
  } else {
    index = static_cast<int>(
        std::uniform_int_distribution<size_t>(0, tensors.size() - 1)(rng));
  }
  if (index >= static_cast<int>(tensors.size())) {
    record.set_message(absl::StrCat("nothing to corrupt: the command has ",
                                    tensors.size(), " ", role, " tensors, no ",
                                    role, " ", index));
    log.Append(std::move(record));
    return;
  }
  const proto::TensorRef& tensor = tensors[index];
  const int64_t count = ElementCount(tensor);
  const int width = static_cast<int>(DtypeElementSize(tensor.dtype()));
  if (inputs) {
    record.set_input(index);
  } else {
    record.set_output(index);
  }
  record.set_dtype(DtypeName(tensor.dtype()));
  if (count == 0 || width == 0) {
    record.set_message(
        absl::StrCat("nothing to corrupt: the ", role, " is empty"));
    log.Append(std::move(record));
    return;
  }
  const std::optional<int64_t> explicit_element =
      stuck ? (fault.spec.stuck_at().has_element()
                   ? std::optional<int64_t>(fault.spec.stuck_at().element())
                   : std::optional<int64_t>(0))
            : (corruption.has_element()
                   ? std::optional<int64_t>(corruption.element())
                   : std::nullopt);
  const int64_t first =
      explicit_element.has_value()
          ? *explicit_element
          : std::uniform_int_distribution<int64_t>(0, count - 1)(rng);
  if (first >= count) {
    record.set_message(absl::StrCat("nothing to corrupt: element ", first,
                                    " is beyond the ", role, "'s ", count,
                                    " elements"));
    log.Append(std::move(record));
    return;
  }
  const int64_t elements =
      stuck ? 1
            : std::min<int64_t>(std::max(corruption.elements(), 1u),
                                count - first);
  bool changed = false;
  for (int64_t i = 0; i < elements; ++i) {
    const std::optional<int64_t> offset = ElementOffset(tensor, first + i);
    if (!offset.has_value()) break;
    absl::StatusOr<PinnedRange> pinned = session.PinRange(
        tensor.address() + static_cast<uint64_t>(*offset * width), width);
    if (!pinned.ok()) {
      record.set_message(
          absl::StrCat("could not corrupt: ", pinned.status().message()));
      break;
    }
    const std::string before =
        FormatElement(pinned->data, width, tensor.dtype());
    std::vector<uint32_t> bits;
    if (stuck) {
      const proto::StuckAt& stuck_at = fault.spec.stuck_at();
      if (ForceBit(pinned->data, width, stuck_at.bit(), stuck_at.value())) {
        bits.push_back(stuck_at.bit());
      }
    } else {
      bits = CorruptElement(pinned->data, width, corruption, rng);
    }
    const std::string value_after =
        FormatElement(pinned->data, width, tensor.dtype());
    changed = changed || value_after != before;
    if (i == 0) {
      record.set_element(first);
      for (uint32_t bit : bits) record.add_bits(bit);
      record.set_value_before(before);
      record.set_value_after(value_after);
    }
  }
  // A stuck bit that already had its value changed nothing: not logged.
  if (stuck && !changed) return;
  if (record.message().empty()) {
    record.set_message(absl::StrCat(
        stuck ? "stuck bit forced in " : "corrupted ", elements,
        " element(s) of ", role, " ", index, " of ", record.command()));
  }
  log.Append(std::move(record));
}

}  // namespace openreg::daemon
