#include "torch_backend/op_encoding.h"

#include <c10/core/TensorImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/node_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "data_plane/tensor_extent.h"
#include "op_codec/op_codec.h"
#include "openreg/launch.h"
#include "torch_backend/device_allocator.h"

namespace openreg::torch_backend {
namespace {

class ClientTensors : public op_codec::DeviceTensorCodec {
 public:
  absl::Status EncodeTensor(const at::Tensor& tensor,
                            proto::Argument* out) override {
    if (tensor.is_privateuseone()) {
      op_codec::EncodeTensorRef(tensor, out->mutable_tensor());
      return absl::OkStatus();
    }
    absl::Status encoded =
        op_codec::EncodeHostTensor(tensor, out->mutable_host_tensor());
    if (encoded.ok()) return encoded;
    return absl::InvalidArgumentError(absl::StrCat(
        "Expected all tensors to be on the same device, but found at least "
        "two devices, openreg and cpu! (",
        encoded.message(),
        ": a CPU tensor was passed to an openreg op; move it with "
        ".to(\"openreg\"))"));
  }

  absl::StatusOr<at::Tensor> DecodeTensorRef(
      const proto::TensorRef& ref) override {
    return WrapDaemonTensor(ref);
  }

  // device="openreg" (no index) means the current device.
  int32_t EncodeDevice(const c10::Device& device) override {
    if (device.type() == c10::DeviceType::PrivateUse1 && !device.has_index()) {
      return c10::impl::getDeviceGuardImpl(device.type())->getDevice().index();
    }
    return device.index();
  }
};

ClientTensors& Tensors() {
  static ClientTensors* tensors = new ClientTensors();
  return *tensors;
}

[[noreturn]] void ThrowCodecError(const absl::Status& status) {
  if (status.code() == absl::StatusCode::kUnimplemented) {
    TORCH_CHECK_NOT_IMPLEMENTED(false, status.message());
  }
  TORCH_CHECK(false, status.message());
}

}  // namespace

void EncodeTensorRef(const at::Tensor& tensor, proto::TensorRef* ref) {
  op_codec::EncodeTensorRef(tensor, ref);
}

void EncodeArgument(const c10::IValue& value, proto::Argument* argument) {
  const absl::Status encoded =
      op_codec::EncodeValue(value, /*type=*/nullptr, Tensors(), argument);
  if (!encoded.ok()) ThrowCodecError(encoded);
}

at::Tensor WrapDaemonTensor(const proto::TensorRef& ref) {
  const c10::IntArrayRef sizes(ref.sizes().data(), ref.sizes_size());
  const c10::IntArrayRef strides(ref.strides().data(), ref.strides_size());
  const auto dtype = static_cast<c10::ScalarType>(ref.dtype());
  const auto device = static_cast<c10::DeviceIndex>(ref.device());
  // The elements spanned, as the daemon allocated them.
  const size_t nbytes =
      static_cast<size_t>(StridedSpanElements(sizes, strides)) *
      c10::elementSize(dtype);
  DeviceAllocator& allocator = GetDeviceAllocator();
  c10::DataPtr data = allocator.Adopt(
      nbytes == 0 ? nullptr : reinterpret_cast<void*>(ref.address()), nbytes,
      device);
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, std::move(data),
                       &allocator, /*resizable=*/true);
  return op_codec::TensorOverStorage(std::move(storage),
                                     c10::DispatchKey::PrivateUse1, ref);
}

namespace {

// c10::SourceLocation holds pointers, and a warning may outlive this call
// (Python's handler buffers it): the few distinct file and function names
// are kept for the life of the process.
const char* Interned(const std::string& text) {
  static absl::Mutex mutex;
  static auto* names = new absl::node_hash_set<std::string>();
  absl::MutexLock lock(&mutex);
  if (names->size() >= 4096 && !names->contains(text)) return "<daemon>";
  return names->insert(text).first->c_str();
}

}  // namespace

namespace {

// Source locations of the daemon kernels' TORCH_WARN_ONCE warnings
// (KernelWarning.once), by interned file and line: "once" is decided here,
// per client process, as CPU decides it per process.
struct OnceSites {
  absl::Mutex mutex;
  // false: known, not raised yet in this process.
  absl::flat_hash_map<std::pair<const char*, uint32_t>, bool> raised
      ABSL_GUARDED_BY(mutex);
};

OnceSites& Once() {
  static auto* sites = new OnceSites();
  return *sites;
}

void NoteOnceSite(const c10::SourceLocation& where) {
  OnceSites& sites = Once();
  absl::MutexLock lock(&sites.mutex);
  sites.raised.try_emplace({where.file, where.line}, false);
}

// False for a once-warning already raised in this process (unless
// torch.set_warn_always(True)); marks it raised otherwise.
bool ShouldRaise(const c10::Warning& warning) {
  const c10::SourceLocation& where = warning.source_location();
  OnceSites& sites = Once();
  absl::MutexLock lock(&sites.mutex);
  auto site = sites.raised.find({where.file, where.line});
  if (site == sites.raised.end()) return true;
  if (c10::WarningUtils::get_warnAlways()) return true;
  const bool first = !site->second;
  site->second = true;
  return first;
}

// Warnings raised at the call from a signature's cached reply
// (RaiseWarningsAtCall), by file, line and message.
struct RaisedAtCall {
  absl::Mutex mutex;
  absl::flat_hash_set<std::string> keys ABSL_GUARDED_BY(mutex);
};

RaisedAtCall& AtCall() {
  static auto* raised = new RaisedAtCall();
  return *raised;
}

std::string WarningKey(const c10::Warning& warning) {
  const c10::SourceLocation& where = warning.source_location();
  return absl::StrCat(where.file == nullptr ? "" : where.file, ":", where.line,
                      ":", warning.msg());
}

template <typename Warnings>
std::vector<c10::Warning> ToC10Warnings(const Warnings& kernel_warnings) {
  std::vector<c10::Warning> warnings;
  for (const proto::KernelWarning& warning : kernel_warnings) {
    const c10::SourceLocation where{Interned(warning.function()),
                                    Interned(warning.file()), warning.line()};
    if (warning.once()) NoteOnceSite(where);
    c10::Warning::warning_variant_t type = c10::UserWarning();
    if (warning.deprecation()) type = c10::DeprecationWarning();
    warnings.emplace_back(type, where, warning.message(), /*verbatim=*/false);
  }
  return warnings;
}

}  // namespace

std::vector<c10::Warning> KernelWarnings(const proto::OpReply& reply) {
  return ToC10Warnings(reply.warnings());
}

void RaisePendingKernelWarnings() {
  std::vector<proto::KernelWarning> pending;
  uint64_t dropped = 0;
  TakeKernelWarnings(&pending, &dropped);
  if (!pending.empty()) {
    std::vector<c10::Warning> warnings = ToC10Warnings(pending);
    {
      RaisedAtCall& at_call = AtCall();
      absl::MutexLock lock(&at_call.mutex);
      warnings.erase(
          std::remove_if(warnings.begin(), warnings.end(),
                         [&](const c10::Warning& warning) {
                           return at_call.keys.contains(WarningKey(warning));
                         }),
          warnings.end());
    }
    RaiseWarnings(warnings);
  }
  if (dropped != 0) {
    TORCH_WARN("openreg: ", dropped,
               " warnings of asynchronous kernels "
               "were dropped (a stream's warning mailbox was full)");
  }
}

void RaiseWarnings(const std::vector<c10::Warning>& warnings) {
  for (const c10::Warning& warning : warnings) {
    if (ShouldRaise(warning)) c10::warn(warning);
  }
}

void RaiseWarningsAtCall(const std::vector<c10::Warning>& warnings) {
  if (!warnings.empty()) {
    RaisedAtCall& at_call = AtCall();
    absl::MutexLock lock(&at_call.mutex);
    for (const c10::Warning& warning : warnings) {
      // Bounded: beyond it, a mailbox copy may be raised again.
      if (at_call.keys.size() < 4096) at_call.keys.insert(WarningKey(warning));
    }
  }
  RaiseWarnings(warnings);
}

c10::IValue DecodeResult(const proto::Argument& result) {
  absl::StatusOr<c10::IValue> decoded =
      op_codec::DecodeValue(result, /*schema=*/nullptr, Tensors());
  if (!decoded.ok()) ThrowCodecError(decoded.status());
  return *std::move(decoded);
}

}  // namespace openreg::torch_backend
