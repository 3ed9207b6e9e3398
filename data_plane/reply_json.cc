#include "data_plane/reply_json.h"

#include "google/protobuf/util/json_util.h"

namespace openreg {

std::string ReplyToJson(const google::protobuf::Message& reply) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string json;
  // Printing a valid message cannot fail.
  (void)google::protobuf::util::MessageToJsonString(reply, &json, options);
  return json;
}

}  // namespace openreg
