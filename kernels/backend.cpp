#include <memgrad/kernels/backend.h>

#include <memgrad/core/allocator.h>

namespace mg::kernels {

std::vector<std::string> missing_kernels(const Backend& b) {
  std::vector<std::string> missing;
#define MG_KERNEL(name, ...) \
  if (!b.name) missing.push_back(#name);
#define MG_OPTIONAL_KERNEL(name, ...)
#include <memgrad/kernels/kernel_list.h>
  return missing;
}

// Every kernel writes something: a `const Out&` parameter, or a list of tensors (all taken as written).
template <class R, class... P>
constexpr bool writes_something(R (*)(P...)) {
  return ((std::is_same_v<P, const Out&> || std::is_same_v<P, const std::vector<Tensor>&> ||
           std::is_same_v<P, const TensorLists&>) ||
          ...);
}
#define MG_KERNEL(name, ...) \
  static_assert(writes_something(decltype(Backend::name){}), #name ": a kernel writes a const Out& or a list");
#include <memgrad/kernels/kernel_list.h>

const Backend& scratch_backend(DeviceType target) {
  static const Backend none;
  return target == DeviceType::CPU ? cpu_scratch() : target == DeviceType::CUDA ? cuda_scratch() : none;
}

void no_kernel(const Device& device, const char* kernel) {
  Op op = memory::current_op();
  throw NotImplementedError(
      detail::str(op == Op::none ? kernel : op_name(op), ": no kernel ", kernel, " for device ", device, " yet"));
}

}  // namespace mg::kernels
