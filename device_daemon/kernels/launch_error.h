// The errors one launch reports itself (bad arguments, outputs that do not
// match, a reply too large): each names its op in front, "aten::add.Tensor:
// ...", so that the client's message says which op failed. Errors a kernel
// throws keep the kernel's own message (aten_op_runner.cc). The name is
// built on demand: only error paths pay for it.
#ifndef OPENREG_DEVICE_DAEMON_KERNELS_LAUNCH_ERROR_H_
#define OPENREG_DEVICE_DAEMON_KERNELS_LAUNCH_ERROR_H_

#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "data_plane/error_codes.h"
#include "protos/commands.pb.h"

namespace openreg::daemon {

// "aten::add.Tensor".
inline std::string OpName(const proto::LaunchOp& op) {
  return op.overload().empty() ? op.name()
                               : absl::StrCat(op.name(), ".", op.overload());
}

// An error of `op`: `code`, with the op's name in front of `what`.
inline absl::Status LaunchError(const proto::LaunchOp& op,
                                proto::ErrorCode code, absl::string_view what) {
  return MakeError(code, absl::StrCat(OpName(op), ": ", what));
}

// The same error, with the op's name in front.
inline absl::Status LaunchError(const proto::LaunchOp& op,
                                const absl::Status& status) {
  return LaunchError(op, ErrorCodeOf(status), status.message());
}

// "[2, 3]": a shape in an error message.
inline std::string ShapeString(c10::IntArrayRef sizes) {
  return absl::StrCat("[", absl::StrJoin(sizes, ", "), "]");
}

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_KERNELS_LAUNCH_ERROR_H_
