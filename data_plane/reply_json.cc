#include "data_plane/reply_json.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace openreg {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

void LowerCase(google::protobuf::Value& value) {
  if (value.has_string_value()) {
    absl::AsciiStrToLower(value.mutable_string_value());
  }
}

// Rewrites the enum values of `message`'s JSON object `json` (and of its
// nested messages) in lower case. protobuf's printer has no such option.
void LowerEnums(const Message& message, google::protobuf::Struct& json) {
  const Reflection* reflection = message.GetReflection();
  const google::protobuf::Descriptor* type = message.GetDescriptor();
  for (int i = 0; i < type->field_count(); ++i) {
    const FieldDescriptor* field = type->field(i);
    auto entry = json.mutable_fields()->find(field->name());
    if (entry == json.mutable_fields()->end() || field->is_map()) continue;
    google::protobuf::Value& value = entry->second;
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_ENUM) {
      if (!field->is_repeated()) {
        LowerCase(value);
        continue;
      }
      for (google::protobuf::Value& item :
           *value.mutable_list_value()->mutable_values()) {
        LowerCase(item);
      }
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE &&
               !absl::StartsWith(field->message_type()->full_name(),
                                 "google.protobuf.")) {
      if (!field->is_repeated()) {
        if (reflection->HasField(message, field) && value.has_struct_value()) {
          LowerEnums(reflection->GetMessage(message, field),
                     *value.mutable_struct_value());
        }
        continue;
      }
      auto* items = value.mutable_list_value()->mutable_values();
      for (int j = 0;
           j < items->size() && j < reflection->FieldSize(message, field);
           ++j) {
        if (!(*items)[j].has_struct_value()) continue;
        LowerEnums(reflection->GetRepeatedMessage(message, field, j),
                   *(*items)[j].mutable_struct_value());
      }
    }
  }
}

}  // namespace

std::string ReplyToJson(const Message& reply) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string json;
  // Printing a valid message cannot fail, nor can reading what it printed.
  (void)google::protobuf::util::MessageToJsonString(reply, &json, options);
  google::protobuf::Struct object;
  if (!google::protobuf::util::JsonStringToMessage(json, &object).ok()) {
    return json;
  }
  LowerEnums(reply, object);
  json.clear();
  (void)google::protobuf::util::MessageToJsonString(object, &json);
  return json;
}

}  // namespace openreg
