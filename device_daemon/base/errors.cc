#include "device_daemon/base/errors.h"

#include <string>

#include "device_daemon/base/log.h"

namespace openreg::daemon {

void ToProtoStatus(const absl::Status& status, proto::Status* out) {
  out->set_code(ErrorCodeOf(status));
  out->set_message(std::string(status.message()));
  // Every control reply's status passes here: the error a client gets is
  // in the log too (--log_level=info).
  if (!status.ok()) {
    Log(LogLevel::kInfo,
        "refused a control request: ", proto::ErrorCode_Name(out->code()), ": ",
        status.message());
  }
}

}  // namespace openreg::daemon
