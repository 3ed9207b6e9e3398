#include "device_daemon/base/errors.h"

#include <string>

namespace openreg::daemon {

void ToProtoStatus(const absl::Status& status, proto::Status* out) {
  out->set_code(ErrorCodeOf(status));
  out->set_message(std::string(status.message()));
}

}  // namespace openreg::daemon
