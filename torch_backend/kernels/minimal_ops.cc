// The explicit openreg kernels PyTorch needs from every backend: factory
// functions, metadata-only views, resizing, set_, copies between host and
// device, and reading a scalar back. Everything else goes through
// remote_fallback.cc.
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/new_empty_strided_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <optional>

#include "data_plane/tensor_extent.h"
#include "torch_backend/command_phase.h"
#include "torch_backend/device_allocator.h"
#include "torch_backend/device_guard.h"
#include "torch_backend/hooks.h"
#include "torch_backend/host_allocator.h"
#include "torch_backend/kernel_warnings.h"
#include "torch_backend/kernels/remote_launch.h"
#include "torch_backend/runtime_error.h"
#include "torch_backend/sync_debug.h"

namespace openreg::torch_backend {
namespace {

constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;
constexpr c10::DispatchKeySet kKeySet(c10::DispatchKey::PrivateUse1);

void CheckFactoryOptions(c10::Device device, std::optional<c10::Layout> layout,
                         std::optional<bool> pin_memory) {
  TORCH_CHECK(device.type() == kType,
              "openreg: expected an openreg device, got ", device);
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "openreg supports only strided tensors");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory),
              "Only CPU tensors can be pinned");
}

// Whether `self.data = from` may keep `self`'s TensorImpl (torch 2.13's
// TensorImpl::has_compatible_shallow_copy_type lists the dense in-tree
// backends but not PrivateUse1, and points backends here). Dense openreg
// and dense CPU tensors are interchangeable, as CUDA and CPU are: so
// module.to("openreg") keeps the same Parameter objects (an optimizer built
// before it trains the moved model; tied weights stay tied).
bool HasCompatibleShallowCopyType(const at::Tensor& self,
                                  const at::Tensor& from) {
  const auto dense_cpu_or_openreg = [](const at::Tensor& tensor) {
    return tensor.layout() == c10::kStrided &&
           (tensor.is_privateuseone() || tensor.is_cpu());
  };
  return dense_cpu_or_openreg(self) && dense_cpu_or_openreg(from);
}

// torch.empty* under torch.use_deterministic_algorithms(True) (and
// fill_uninitialized_memory, the default) holds NaN or the dtype's maximum,
// as CPU's empty does. Op outputs the fallback allocates are not filled:
// the op writes them (as on CPU).
at::Tensor FillIfDeterministic(at::Tensor tensor) {
  const at::Context& context = at::globalContext();
  if (C10_UNLIKELY(context.deterministicAlgorithms() &&
                   context.deterministicFillUninitializedMemory())) {
    at::native::fill_empty_deterministic_(tensor);
  }
  return tensor;
}

at::Tensor EmptyMemoryFormat(c10::IntArrayRef size,
                             std::optional<c10::ScalarType> dtype,
                             std::optional<c10::Layout> layout,
                             std::optional<c10::Device> device,
                             std::optional<bool> pin_memory,
                             std::optional<c10::MemoryFormat> memory_format) {
  const c10::Device where = c10::device_or_default(device);
  CheckFactoryOptions(where, layout, pin_memory);
  const c10::DeviceGuard guard(where);
  return FillIfDeterministic(
      at::detail::empty_generic(size, &GetDeviceAllocator(), kKeySet,
                                c10::dtype_or_default(dtype), memory_format));
}

at::Tensor EmptyStrided(c10::IntArrayRef size, c10::IntArrayRef stride,
                        std::optional<c10::ScalarType> dtype,
                        std::optional<c10::Layout> layout,
                        std::optional<c10::Device> device,
                        std::optional<bool> pin_memory) {
  const c10::Device where = c10::device_or_default(device);
  CheckFactoryOptions(where, layout, pin_memory);
  const c10::DeviceGuard guard(where);
  return FillIfDeterministic(
      at::detail::empty_strided_generic(size, stride, &GetDeviceAllocator(),
                                        kKeySet, c10::dtype_or_default(dtype)));
}

at::Tensor AsStrided(const at::Tensor& self, c10::SymIntArrayRef size,
                     c10::SymIntArrayRef stride,
                     std::optional<c10::SymInt> storage_offset) {
  return at::native::as_strided_tensorimpl(
      self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
      storage_offset ? std::optional<int64_t>(
                           storage_offset->guard_int(__FILE__, __LINE__))
                     : std::nullopt);
}

at::Tensor View(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor ReshapeAlias(const at::Tensor& self, c10::SymIntArrayRef size,
                        c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size),
                                    C10_AS_INTARRAYREF_SLOW(stride));
}

// Grows the storage through the device allocator (contents copied on the
// device), then updates the metadata; never touches device memory here.
void SetSizesAndStrides(const at::Tensor& self, c10::IntArrayRef size,
                        std::optional<c10::IntArrayRef> stride) {
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  if (stride.has_value()) {
    impl->set_sizes_and_strides(size, *stride);
  } else {
    impl->set_sizes_contiguous(size);
  }
  if (impl->numel() == 0) return;
  const int64_t span = StridedSpanElements(impl->sizes(), impl->strides());
  EnsureStorageBytes(impl->storage(),
                     (impl->storage_offset() + span) * impl->itemsize());
}

const at::Tensor& Resize(const at::Tensor& self, c10::SymIntArrayRef size,
                         std::optional<c10::MemoryFormat> memory_format) {
  const c10::IntArrayRef sizes = C10_AS_INTARRAYREF_SLOW(size);
  for (int64_t dim : sizes) {
    TORCH_CHECK(dim >= 0, "Trying to create tensor with negative dimension ",
                dim, ": ", sizes);
  }
  if (self.sizes() != sizes) SetSizesAndStrides(self, sizes, std::nullopt);
  if (memory_format.has_value()) {
    TORCH_CHECK(*memory_format != c10::MemoryFormat::Preserve,
                "Unsupported memory format ", *memory_format);
    self.unsafeGetTensorImpl()->empty_tensor_restride(*memory_format);
  }
  return self;
}

at::Tensor& SetSourceStorageWithOffset(at::Tensor& self, c10::Storage source,
                                       c10::SymInt storage_offset,
                                       c10::SymIntArrayRef size,
                                       c10::SymIntArrayRef stride) {
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  if (!impl->storage().is_alias_of(source))
    impl->set_storage_keep_dtype(source);
  impl->set_storage_offset(storage_offset.guard_int(__FILE__, __LINE__));
  // set_(storage, offset, size) without strides means contiguous, as in
  // CPU's set_storage_cpu_.
  const c10::IntArrayRef strides = C10_AS_INTARRAYREF_SLOW(stride);
  SetSizesAndStrides(self, C10_AS_INTARRAYREF_SLOW(size),
                     strides.empty() && !size.empty()
                         ? std::nullopt
                         : std::optional<c10::IntArrayRef>(strides));
  return self;
}

at::Tensor& SetSourceStorage(at::Tensor& self, c10::Storage source) {
  const int64_t elements =
      static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  const std::vector<c10::SymInt> size = {c10::SymInt(elements)};
  const std::vector<c10::SymInt> stride = {c10::SymInt(1)};
  return SetSourceStorageWithOffset(self, std::move(source), 0, size, stride);
}

at::Tensor& SetSourceTensor(at::Tensor& self, const at::Tensor& source) {
  if (self.unsafeGetTensorImpl() == source.unsafeGetTensorImpl()) return self;
  return SetSourceStorageWithOffset(self, source.storage(),
                                    source.sym_storage_offset(),
                                    source.sym_sizes(), source.sym_strides());
}

at::Tensor& SetEmpty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0,
                       &GetDeviceAllocator(), /*resizable=*/true);
  return SetSourceStorage(self, std::move(storage));
}

const c10::OperatorHandle& CopyOp() {
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::copy_", "");
  return op;
}

// Device-to-device copy (possibly across devices, with conversion) by the
// daemon's copy_ kernel. Cross-device copies order both devices' current
// streams around the copy, as CUDA's copy_ does.
void CopyOnDevice(const at::Tensor& dst, const at::Tensor& src,
                  bool non_blocking) {
  const c10::DeviceIndex dst_device = dst.device().index();
  const c10::DeviceIndex src_device = src.device().index();
  const StreamId dst_stream =
      static_cast<StreamId>(CurrentStream(dst_device).id());
  const StreamId src_stream =
      static_cast<StreamId>(CurrentStream(src_device).id());
  const c10::DeviceGuard guard(dst.device());
  if (dst_stream != src_stream) {
    OPENREG_CHECK(StreamWaitStream(dst_stream, src_stream));
  }
  const std::vector<c10::IValue> arguments = {dst, src, non_blocking};
  LaunchAsync(CopyOp(), arguments, {dst}, dst_device);
  if (dst_stream != src_stream) {
    OPENREG_CHECK(StreamWaitStream(src_stream, dst_stream));
  }
}

// True when `tensor`'s bytes are exactly what the other side of a plain
// byte copy of `like` needs: contiguous, same dtype and sizes, no lazy
// conjugate / negative bits.
bool IsPlainCopyOf(const at::Tensor& tensor, const at::Tensor& like) {
  return tensor.is_contiguous() && !tensor.is_conj() && !tensor.is_neg() &&
         tensor.scalar_type() == like.scalar_type() &&
         tensor.sizes() == like.sizes();
}

bool IsPinnedTensor(const at::Tensor& tensor) {
  return IsPinnedRange(tensor.const_data_ptr(), tensor.nbytes());
}

// A copy with a pinned host side: enqueued on the device's current stream,
// where the daemon copies from or to the pinned memory directly. With
// `non_blocking` it returns at once and the pinned block is kept from reuse
// until the copy is done (as CUDA's copy_ does); otherwise it waits.
void CopyPinned(void* dst, const void* src, size_t nbytes, MemcpyKind kind,
                const at::Tensor& pinned, c10::DeviceIndex device,
                bool non_blocking) {
  if (!non_blocking) {
    WarnOrErrorOnSync(kind == MemcpyKind::kDeviceToHost
                          ? "a blocking copy from the device to pinned memory"
                          : "a blocking copy from pinned memory to the device");
  }
  const c10::Stream stream = CurrentStream(device);
  const StreamId stream_id = static_cast<StreamId>(stream.id());
  StampCommandPhase();
  OPENREG_CHECK(MemcpyAsync(dst, src, nbytes, kind, stream_id));
  if (non_blocking) {
    RecordPinnedUse(pinned, stream);
  } else {
    OPENREG_CHECK(StreamSynchronize(stream_id));
    RaisePendingKernelWarnings();
  }
}

// Host -> device. The host side is made contiguous in the destination's
// dtype, with its conjugate and negative bits resolved, first; a strided
// destination, or one with those bits (whose memory holds conjugated /
// negated values), gets a plain device temporary and a device-side copy
// that applies them. A pinned source that needs no conversion is copied by
// the daemon directly (asynchronously with `non_blocking`); anything else
// is staged through shared memory.
void CopyFromHost(const at::Tensor& dst, const at::Tensor& src,
                  bool non_blocking) {
  const c10::DeviceIndex device = dst.device().index();
  const bool pinned = IsPlainCopyOf(src, dst) && IsPinnedTensor(src);
  const at::Tensor host = pinned ? src
                                 : src.resolve_conj()
                                       .resolve_neg()
                                       .to(dst.scalar_type())
                                       .expand(dst.sizes())
                                       .contiguous();
  const bool direct = dst.is_contiguous() && !dst.is_conj() && !dst.is_neg();
  at::Tensor target = direct ? dst : at::empty(dst.sizes(), dst.options());
  if (pinned) {
    CopyPinned(target.mutable_data_ptr(), host.const_data_ptr(), host.nbytes(),
               MemcpyKind::kHostToDevice, host, device, non_blocking);
  } else {
    CopyHostToDevice(target.mutable_data_ptr(), host.const_data_ptr(),
                     host.nbytes(), device);
  }
  if (!direct) CopyOnDevice(dst, target, /*non_blocking=*/non_blocking);
}

// Device -> host: the device side is made contiguous on the device, read
// back, then converted on the host if needed. A pinned destination that
// needs no conversion is written by the daemon directly.
void CopyToHost(const at::Tensor& dst, const at::Tensor& src,
                bool non_blocking) {
  const at::Tensor device_src =
      src.is_contiguous() && !src.is_conj() && !src.is_neg()
          ? src
          : src.resolve_conj().resolve_neg().contiguous();
  const bool direct = IsPlainCopyOf(dst, src);
  if (direct && IsPinnedTensor(dst)) {
    CopyPinned(dst.mutable_data_ptr(), device_src.const_data_ptr(),
               dst.nbytes(), MemcpyKind::kDeviceToHost, dst,
               src.device().index(), non_blocking);
    return;
  }
  at::Tensor host =
      direct ? dst : at::empty(src.sizes(), src.options().device(at::kCPU));
  CopyDeviceToHost(host.mutable_data_ptr(), device_src.const_data_ptr(),
                   host.nbytes(), src.device().index());
  if (!direct) dst.copy_(host);
}

at::Tensor CopyFrom(const at::Tensor& self, const at::Tensor& dst,
                    bool non_blocking) {
  TORCH_CHECK(self.defined() && dst.defined(),
              "openreg: copy between undefined tensors");
  if (dst.numel() == 0) return dst;
  // As copy_'s TensorIterator on CPU and CUDA: an expanded destination
  // would be written through one element several times.
  at::assert_no_internal_overlap(dst);
  if (self.is_privateuseone() && dst.is_privateuseone()) {
    CopyOnDevice(dst, self, non_blocking);
  } else if (dst.is_privateuseone()) {
    TORCH_CHECK(self.is_cpu(), "openreg: cannot copy from ", self.device());
    CopyFromHost(dst, self, non_blocking);
  } else {
    TORCH_CHECK(dst.is_cpu(), "openreg: cannot copy to ", dst.device());
    CopyToHost(dst, self, non_blocking);
  }
  return dst;
}

at::Tensor CopyFromAndResize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.is_privateuseone()) {
    Resize(dst, self.sym_sizes(), std::nullopt);
  } else {
    at::native::resize_(dst, self.sizes(), std::nullopt);
  }
  return CopyFrom(self, dst, /*non_blocking=*/false);
}

template <typename Element>
c10::Scalar ReadElement(const at::Tensor& self) {
  Element value;
  CopyDeviceToHost(&value, self.const_data_ptr(), sizeof(Element),
                   self.device().index());
  return c10::Scalar(value);
}

// As CUDA's _local_scalar_dense: the element into a local of its C++ type,
// not into a CPU tensor whose item() would allocate and dispatch a second
// time. The dtypes are CUDA's; nullopt for the others.
std::optional<c10::Scalar> ReadPlainElement(const at::Tensor& self) {
  switch (self.scalar_type()) {
#define OPENREG_READ_ELEMENT(type, name) \
  case at::ScalarType::name:             \
    return ReadElement<type>(self);
    AT_FORALL_SCALAR_TYPES_WITH_COMPLEX(OPENREG_READ_ELEMENT)
    OPENREG_READ_ELEMENT(uint16_t, UInt16)
    OPENREG_READ_ELEMENT(uint32_t, UInt32)
    OPENREG_READ_ELEMENT(uint64_t, UInt64)
#undef OPENREG_READ_ELEMENT
    default:
      return std::nullopt;
  }
}

c10::Scalar LocalScalarDense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(),
              " elements cannot be converted to Scalar");
  const c10::DeviceGuard guard(self.device());
  if (!self.is_quantized()) {
    if (std::optional<c10::Scalar> value = ReadPlainElement(self)) {
      return *value;
    }
  }
  // CPU's own item() on a host copy: it dequantizes, and it raises CPU's
  // error for dtypes without a scalar.
  at::Tensor host = at::empty({}, self.options().device(at::kCPU));
  CopyDeviceToHost(host.mutable_data_ptr(), self.const_data_ptr(),
                   self.itemsize(), self.device().index());
  return host.item();
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", EmptyMemoryFormat);
  m.impl("empty_strided", EmptyStrided);
  m.impl("_has_compatible_shallow_copy_type",
         TORCH_FN(HasCompatibleShallowCopyType));
  // ATen's own composite (empty_strided with self's options): no kernel in
  // the daemon, whose result would have to be copied into an output that
  // may have zero strides.
  m.impl("new_empty_strided", TORCH_FN(at::native::new_empty_strided_symint));
  m.impl("as_strided", AsStrided);
  m.impl("view", View);
  m.impl("_reshape_alias", ReshapeAlias);
  m.impl("resize_", Resize);
  m.impl("set_.source_Storage_storage_offset", SetSourceStorageWithOffset);
  m.impl("set_.source_Storage", SetSourceStorage);
  m.impl("set_.source_Tensor", SetSourceTensor);
  m.impl("set_", SetEmpty);
  m.impl("_copy_from", CopyFrom);
  m.impl("_copy_from_and_resize", CopyFromAndResize);
  m.impl("_local_scalar_dense", LocalScalarDense);
}

// Quantized tensors copy their integer representation the same way (copy_
// sets the destination's quantizer first).
TORCH_LIBRARY_IMPL(aten, QuantizedPrivateUse1, m) {
  m.impl("_copy_from", CopyFrom);
}

// The Conjugate and Negative fallbacks materialize lazily conjugated or
// negated inputs with clone(), whose copy_ calls _copy_from again: without
// these fallthroughs, copying such a tensor to or from openreg recurses
// until the stack overflows. CopyFrom handles both bits itself (the daemon's
// copy_ applies them; host sides are resolved on the host).
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

}  // namespace openreg::torch_backend
