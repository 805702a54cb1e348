#include <memgrad/kernels/backend.h>

namespace mg::kernels {

std::vector<std::string> missing_kernels(const Backend& b) {
  std::vector<std::string> missing;
#define MG_KERNEL(name, ...) \
  if (!b.name) missing.push_back(#name);
#define MG_OPTIONAL_KERNEL(name, ...)
#include <memgrad/kernels/kernel_list.h>
  return missing;
}

const Backend& scratch_backend(DeviceType target) {
  static const Backend none;
  return target == DeviceType::CPU ? cpu_scratch() : target == DeviceType::CUDA ? cuda_scratch() : none;
}

}  // namespace mg::kernels
