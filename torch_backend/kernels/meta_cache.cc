#include "torch_backend/kernels/meta_cache.h"

#include <ATen/Context.h>
#include <ATen/MemoryOverlap.h>
#include <c10/core/DefaultDtype.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/synchronization/mutex.h"

namespace openreg::torch_backend {
namespace {

constexpr size_t kMaxEntries = 16384;

enum class Tag : char {
  kNone = 'n',
  kTensor = 't',
  kUndefinedTensor = 'u',
  kInt = 'i',
  kDouble = 'd',
  kBool = 'b',
  kString = 's',
  kComplex = 'c',
  kDevice = 'v',
  kGenerator = 'g',
  kList = 'l',
};

// Writes a key into a reused string through a cursor: one bounds check
// per field, not a string append per field (appends were a tenth of a
// small op's cost in the client). The key is the string's first bytes
// once the writer is gone.
class KeyWriter {
 public:
  explicit KeyWriter(std::string* key) : key_(key) {
    key_->resize(kInitialBytes);
    cursor_ = key_->data();
    end_ = cursor_ + key_->size();
  }
  ~KeyWriter() { key_->resize(cursor_ - key_->data()); }
  KeyWriter(const KeyWriter&) = delete;
  KeyWriter& operator=(const KeyWriter&) = delete;

  void Put(Tag tag) { Put(static_cast<char>(tag)); }
  template <typename T>
  void Put(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>);
    Reserve(sizeof(value));
    std::memcpy(cursor_, &value, sizeof(value));
    cursor_ += sizeof(value);
  }
  void PutBytes(const void* data, size_t size) {
    Put(size);
    Reserve(size);
    std::memcpy(cursor_, data, size);
    cursor_ += size;
  }

 private:
  static constexpr size_t kInitialBytes = 256;

  void Reserve(size_t bytes) {
    if (static_cast<size_t>(end_ - cursor_) < bytes) Grow(bytes);
  }
  void Grow(size_t bytes) {
    const size_t used = cursor_ - key_->data();
    key_->resize(std::max(2 * key_->size(), used + bytes));
    cursor_ = key_->data() + used;
    end_ = key_->data() + key_->size();
  }

  std::string* key_;
  char* cursor_;
  char* end_;
};

void PutDouble(double value, bool by_class, KeyWriter* key);

void PutTensor(const at::Tensor& tensor, bool keep_storage, bool by_class,
               KeyWriter* key) {
  if (!tensor.defined()) {
    key->Put(Tag::kUndefinedTensor);
    return;
  }
  key->Put(Tag::kTensor);
  key->Put(static_cast<int8_t>(tensor.device().type()));
  key->Put(static_cast<int8_t>(tensor.scalar_type()));
  key->Put(static_cast<int32_t>(tensor.dim()));
  for (int64_t size : tensor.sizes()) key->Put(size);
  for (int64_t stride : tensor.strides()) key->Put(stride);
  if (tensor.is_cpu()) {
    // 0-dim CPU scalars promote differently when they wrap a Python number.
    const bool wrapped = tensor.unsafeGetTensorImpl()->is_wrapped_number();
    key->Put(wrapped);
    if (wrapped && by_class && tensor.scalar_type() == c10::kDouble) {
      // A Python float passed where a tensor goes (`x / 3.7`).
      PutDouble(*tensor.const_data_ptr<double>(), by_class, key);
    } else if (tensor.numel() == 1) {
      key->PutBytes(tensor.const_data_ptr(), tensor.element_size());
    }
  }
  if (keep_storage) {
    key->Put(tensor.storage_offset());
    key->Put(tensor.storage().nbytes());
  }
}

// The optimizer and learning-rate-schedule arithmetic: ops whose
// floating-point Scalar arguments (alpha, value, weight) change at every
// step (Adam's step size, a scheduled learning rate) while no kernel checks
// their value beyond its type, its sign and whether it is zero (integer
// division by zero, an integral alpha for integer tensors). Keyed by those,
// a step's new step size finds the result checked at the first step.
bool ScalarValuesUnchecked(const c10::OperatorHandle& op) {
  static constexpr std::string_view kOps[] = {
      "aten::add", "aten::add_", "aten::sub", "aten::sub_", "aten::rsub",
      "aten::mul", "aten::mul_", "aten::div", "aten::div_", "aten::addcdiv",
      "aten::addcdiv_", "aten::addcmul", "aten::addcmul_", "aten::lerp",
      "aten::lerp_",
      // CPU's fused optimizer steps check their lists' lengths, never the
      // learning rate, betas, weight decay or eps that a schedule changes.
      "aten::_fused_adam_", "aten::_fused_adamw_", "aten::_fused_sgd_",
      "aten::_fused_adagrad_"};
  // Their foreach forms (foreach_ops.h) take the same scalars, or a list of
  // them (the per-parameter step sizes of Adam's multi-tensor step).
  constexpr std::string_view kForeach = "aten::_foreach_";
  std::string name = op.operator_name().name;
  if (name.rfind(kForeach, 0) == 0) {
    name = "aten::" + name.substr(kForeach.size());
  }
  bool unchecked = false;
  for (std::string_view candidate : kOps) unchecked |= name == candidate;
  return unchecked;
}

// A floating-point scalar as the key keeps it: exactly, unless `by_class`
// and it is finite and not integral, then only its sign and binary
// exponent (what the ops above can tell apart).
void PutDouble(double value, bool by_class, KeyWriter* key) {
  if (by_class && std::isfinite(value) && value != std::trunc(value)) {
    int exponent = 0;
    std::frexp(value, &exponent);
    key->Put(Tag::kDouble);
    key->Put(std::signbit(value));
    key->Put(exponent);
    return;
  }
  key->Put(Tag::kDouble);
  key->Put(value);
}

bool PutValue(const c10::IValue& value, bool keep_storage, bool by_class,
              KeyWriter* key) {
  if (value.isNone()) {
    key->Put(Tag::kNone);
  } else if (value.isTensor()) {
    PutTensor(value.toTensor(), keep_storage, by_class, key);
  } else if (value.isInt()) {
    key->Put(Tag::kInt);
    key->Put(value.toInt());
  } else if (value.isSymInt()) {
    key->Put(Tag::kInt);
    key->Put(value.toSymInt().guard_int(__FILE__, __LINE__));
  } else if (value.isDouble()) {
    PutDouble(value.toDouble(), by_class, key);
  } else if (value.isBool()) {
    key->Put(Tag::kBool);
    key->Put(value.toBool());
  } else if (value.isString()) {
    key->Put(Tag::kString);
    const std::string& text = value.toStringRef();
    key->PutBytes(text.data(), text.size());
  } else if (value.isComplexDouble()) {
    key->Put(Tag::kComplex);
    key->Put(value.toComplexDouble());
  } else if (value.isDevice()) {
    key->Put(Tag::kDevice);
    key->Put(static_cast<int8_t>(value.toDevice().type()));
    key->Put(value.toDevice().index());
  } else if (value.isGenerator()) {
    key->Put(Tag::kGenerator);  // never affects output metadata
  } else if (value.isList()) {
    const c10::List<c10::IValue> list = value.toList();
    key->Put(Tag::kList);
    key->Put(list.size());
    for (const c10::IValue& element : list) {
      if (!PutValue(element, keep_storage, by_class, key)) return false;
    }
  } else {
    return false;
  }
  return true;
}

struct Cache {
  absl::Mutex mutex;
  absl::flat_hash_map<std::string, std::shared_ptr<const MetaResult>> entries
      ABSL_GUARDED_BY(mutex);
};

Cache& GlobalCache() {
  static auto* cache = new Cache();  // leaked: used until process exit
  return *cache;
}

// Which written tensors share memory with which other tensor arguments,
// and how (ATen's overlap status). CPU's kernels refuse some of these calls
// (an out= that partly overlaps an input: "unsupported operation", raised
// by the daemon's kernel, whose tensors alias as the client's do): a call
// whose aliasing was not seen before is a miss, so its launch is checked
// and such an error is raised at the call.
void PutAliasing(const c10::FunctionSchema& schema,
                 c10::ArrayRef<c10::IValue> arguments, KeyWriter* key) {
  const std::vector<c10::Argument>& declared = schema.arguments();
  for (size_t w = 0; w < arguments.size() && w < declared.size(); ++w) {
    const c10::AliasInfo* alias = declared[w].alias_info();
    if (alias == nullptr || !alias->isWrite() || !arguments[w].isTensor()) {
      continue;
    }
    const at::Tensor& written = arguments[w].toTensor();
    if (!written.defined() || !written.has_storage()) continue;
    for (size_t i = 0; i < arguments.size(); ++i) {
      if (i == w || !arguments[i].isTensor()) continue;
      const at::Tensor& other = arguments[i].toTensor();
      if (!other.defined() || !other.has_storage() ||
          !other.storage().is_alias_of(written.storage())) {
        continue;
      }
      key->Put(static_cast<uint16_t>(w));
      key->Put(static_cast<uint16_t>(i));
      key->Put(static_cast<int8_t>(at::get_overlap_status(written, other)));
    }
  }
}

// The same where a tensor list is involved (a foreach op's written lists,
// foreach_ops.h; `cat.out` into one of its inputs): which written tensor
// shares its storage with which other tensor, positions given as (argument,
// element). Found through a map of the written storages, so that a step
// over hundreds of parameters costs one lookup per tensor, not one per
// pair. Pairs of plain tensor arguments are PutAliasing's.
void PutListAliasing(const c10::FunctionSchema& schema,
                     c10::ArrayRef<c10::IValue> arguments, KeyWriter* key) {
  struct Position {
    uint16_t argument;
    uint16_t element;
    bool in_list;
    const at::Tensor* tensor;
  };
  auto for_each_tensor = [&](auto&& visit) {
    for (size_t i = 0; i < arguments.size(); ++i) {
      if (arguments[i].isTensor()) {
        visit(Position{static_cast<uint16_t>(i), 0, false,
                       &arguments[i].toTensor()});
      } else if (arguments[i].isTensorList()) {
        c10::ArrayRef<c10::IValue> list = arguments[i].toListRef();
        for (size_t e = 0; e < list.size(); ++e) {
          visit(Position{static_cast<uint16_t>(i), static_cast<uint16_t>(e),
                         true, &list[e].toTensor()});
        }
      }
    }
  };
  auto storage_of = [](const at::Tensor& tensor) -> const c10::StorageImpl* {
    if (!tensor.defined() || !tensor.has_storage()) return nullptr;
    return tensor.storage().unsafeGetStorageImpl();
  };
  const std::vector<c10::Argument>& declared = schema.arguments();
  thread_local absl::flat_hash_map<const c10::StorageImpl*,
                                   absl::InlinedVector<Position, 1>>
      written;
  written.clear();
  for_each_tensor([&](const Position& position) {
    const c10::AliasInfo* alias = position.argument < declared.size()
                                      ? declared[position.argument].alias_info()
                                      : nullptr;
    const c10::StorageImpl* storage = storage_of(*position.tensor);
    if (alias != nullptr && alias->isWrite() && storage != nullptr) {
      written[storage].push_back(position);
    }
  });
  if (written.empty()) return;
  for_each_tensor([&](const Position& other) {
    auto it = written.find(storage_of(*other.tensor));
    if (it == written.end()) return;
    for (const Position& target : it->second) {
      const bool same =
          target.argument == other.argument && target.element == other.element;
      if (same || (!target.in_list && !other.in_list)) continue;
      key->Put(target.argument);
      key->Put(target.element);
      key->Put(other.argument);
      key->Put(other.element);
      key->Put(static_cast<int8_t>(
          at::get_overlap_status(*target.tensor, *other.tensor)));
    }
  });
}

}  // namespace

MetaKeyTraits MetaKeyTraitsOf(const c10::OperatorHandle& op) {
  MetaKeyTraits traits;
  traits.scalars_by_class = ScalarValuesUnchecked(op);
  for (const c10::Argument& argument : op.schema().arguments()) {
    const c10::TypePtr& type = argument.real_type();
    traits.has_tensor_list =
        traits.has_tensor_list ||
        (type->kind() == c10::TypeKind::ListType &&
         type->containedType(0)->kind() == c10::TypeKind::TensorType);
  }
  return traits;
}

bool BuildMetaCacheKey(const c10::OperatorHandle& op,
                       const MetaKeyTraits& traits,
                       c10::ArrayRef<c10::IValue> arguments, bool keep_storage,
                       std::string* key_buffer) {
  KeyWriter key(key_buffer);
  // The schema object lives as long as the operator registration.
  key.Put(reinterpret_cast<uintptr_t>(&op.schema()));
  key.Put(keep_storage);
  // Settings that change what a Meta kernel answers: the default dtype
  // (`uint8_tensor + 5.5`, `int / int`) and deterministic mode.
  key.Put(static_cast<int8_t>(c10::get_default_dtype_as_scalartype()));
  const at::Context& context = at::globalContext();
  key.Put(context.deterministicAlgorithms());
  key.Put(context.deterministicAlgorithmsWarnOnly());
  const bool by_class = traits.scalars_by_class;
  key.Put(by_class);
  for (const c10::IValue& argument : arguments) {
    if (!PutValue(argument, keep_storage, by_class, &key)) return false;
  }
  PutAliasing(op.schema(), arguments, &key);
  if (traits.has_tensor_list) {
    PutListAliasing(op.schema(), arguments, &key);
  }
  return true;
}

std::shared_ptr<const MetaResult> FindMetaResult(absl::string_view key) {
  Cache& cache = GlobalCache();
  absl::ReaderMutexLock lock(&cache.mutex);
  auto it = cache.entries.find(key);
  if (it == cache.entries.end()) return nullptr;
  return it->second;
}

void StoreMetaResult(std::string key,
                     std::shared_ptr<const MetaResult> result) {
  Cache& cache = GlobalCache();
  absl::MutexLock lock(&cache.mutex);
  if (cache.entries.size() >= kMaxEntries) cache.entries.clear();
  cache.entries.insert_or_assign(std::move(key), std::move(result));
}

}  // namespace openreg::torch_backend
