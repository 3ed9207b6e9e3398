#include "device_daemon/kernels/op_table.h"

#include <string_view>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "device_daemon/kernels/pointwise_kernel.h"

namespace openreg::daemon {
namespace {

bool IsPlainTensor(const c10::TypePtr& type) {
  return type->kind() == c10::TypeKind::TensorType;
}

// A functional op: reads its arguments, returns fresh tensors only.
bool IsFunctional(const c10::FunctionSchema& schema) {
  if (schema.returns().empty() || schema.is_mutable()) return false;
  for (const c10::Argument& ret : schema.returns()) {
    if (ret.alias_info() != nullptr || !IsPlainTensor(ret.real_type())) {
      return false;
    }
  }
  for (const c10::Argument& argument : schema.arguments()) {
    if (argument.alias_info() != nullptr) return false;
  }
  return true;
}

// `candidate` takes `functional`'s arguments (same names and types, same
// order) followed by exactly one out= tensor per return.
bool IsOutVariantOf(const c10::FunctionSchema& candidate,
                    const c10::FunctionSchema& functional) {
  const std::vector<c10::Argument>& inputs = functional.arguments();
  const std::vector<c10::Argument>& arguments = candidate.arguments();
  const size_t outputs = functional.returns().size();
  if (arguments.size() != inputs.size() + outputs ||
      candidate.returns().size() != outputs) {
    return false;
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (arguments[i].name() != inputs[i].name() ||
        *arguments[i].real_type() != *inputs[i].real_type()) {
      return false;
    }
  }
  for (size_t i = inputs.size(); i < arguments.size(); ++i) {
    if (!arguments[i].is_out() || !IsPlainTensor(arguments[i].real_type())) {
      return false;
    }
  }
  return true;
}

std::optional<c10::OperatorHandle> FindOutVariant(
    const c10::OperatorHandle& op) {
  const c10::FunctionSchema& schema = op.schema();
  // Only structured ops: their functional kernel is by construction the
  // out= kernel writing into a fresh output (ATen registers the generic
  // version under CompositeExplicitAutogradNonFunctional). Other ops' out=
  // variants may differ (binary_cross_entropy.out uses its output as
  // scratch, native_batch_norm.out wants other statistics dtypes).
  if (!IsFunctional(schema) ||
      !op.hasKernelForDispatchKey(
          c10::DispatchKey::CompositeExplicitAutogradNonFunctional)) {
    return std::nullopt;
  }
  c10::Dispatcher& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    if (name.name != schema.name() ||
        name.overload_name == schema.overload_name()) {
      continue;
    }
    std::optional<c10::OperatorHandle> candidate = dispatcher.findSchema(name);
    if (candidate.has_value() && IsOutVariantOf(candidate->schema(), schema)) {
      return candidate;
    }
  }
  return std::nullopt;
}

// A foreach op (`_foreach_addcdiv_.ScalarList`) runs its per-tensor op on
// each element (ATen's CompositeExplicitAutograd loop): pointwise when that
// op is. `_foreach_max` is the one foreach reduction whose per-tensor name
// also names a pointwise op (max.other).
bool IsForeachOfPointwise(const c10::OperatorHandle& op) {
  constexpr std::string_view kForeach = "aten::_foreach_";
  const std::string& name = op.operator_name().name;
  if (name.rfind(kForeach, 0) != 0 || name == "aten::_foreach_max") {
    return false;
  }
  std::string base = "aten::" + name.substr(kForeach.size());
  if (base.back() == '_') base.pop_back();
  c10::Dispatcher& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& candidate : dispatcher.getAllOpNames()) {
    if (candidate.name != base) continue;
    std::optional<c10::OperatorHandle> handle =
        dispatcher.findSchema(candidate);
    if (handle.has_value() && handle->hasTag(at::Tag::pointwise)) return true;
  }
  return false;
}

}  // namespace

const ResolvedOp* ResolveOp(const std::string& name,
                            const std::string& overload) {
  // Per thread: the stream workers never contend for it. Node-based, so
  // returned entries stay put; unknown names are not remembered (a client
  // sending made-up names must not grow it).
  thread_local absl::node_hash_map<std::string, ResolvedOp> table;
  thread_local std::string key;
  key.assign(name).push_back('.');
  key.append(overload);
  auto it = table.find(key);
  if (it == table.end()) {
    std::optional<c10::OperatorHandle> handle =
        c10::Dispatcher::singleton().findSchema({name, overload});
    if (!handle.has_value()) return nullptr;
    it =
        table
            .emplace(key, ResolvedOp{*handle,
                                     handle->hasTag(at::Tag::pointwise) ||
                                         IsForeachOfPointwise(*handle),
                                     FindOutVariant(*handle),
                                     PointwiseKernel::MayMatch(name, overload)})
            .first;
  }
  return &it->second;
}

}  // namespace openreg::daemon
