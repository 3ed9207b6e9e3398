// The JSON form of the daemon's replies for the programs that read them:
// `openreg-ctl --json` and the torch_openreg bindings whose strings Python
// parses (stats, the fault list and log, the command profile). Proto field
// names; every field printed, even at its default, so that readers need no
// defaults of their own; enum values in lower case, as plans write them
// ("kernel", "backward"; data_plane/fault_plan.h); otherwise proto3's JSON
// mapping, whose 64-bit integers are strings. One form, so that Python
// reads either source the same way.
#ifndef OPENREG_DATA_PLANE_REPLY_JSON_H_
#define OPENREG_DATA_PLANE_REPLY_JSON_H_

#include <string>

#include "google/protobuf/message.h"

namespace openreg {

std::string ReplyToJson(const google::protobuf::Message& reply);

}  // namespace openreg

#endif  // OPENREG_DATA_PLANE_REPLY_JSON_H_
