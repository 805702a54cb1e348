#include <memgrad/core/device.h>

#include <ostream>

#include <memgrad/core/cuda/runtime_impl.h>
#include <memgrad/core/error.h>

namespace mg {

namespace {
thread_local DeviceType t_meta_target = DeviceType::CPU;
}
DeviceType meta_target() { return t_meta_target; }
MetaTargetGuard::MetaTargetGuard(DeviceType target) : previous_(t_meta_target) {
  MG_CHECK(target != DeviceType::Meta, ValueError, "MetaTargetGuard: expected cpu or cuda, got meta");
  t_meta_target = target;
}
MetaTargetGuard::~MetaTargetGuard() { t_meta_target = previous_; }

Device::Device(const std::string& spec) {
  auto colon = spec.find(':');
  std::string kind = spec.substr(0, colon);
  if (kind == "cpu")
    type = DeviceType::CPU;
  else if (kind == "cuda")
    type = DeviceType::CUDA;
  else if (kind == "meta")
    type = DeviceType::Meta;
  else
    throw ValueError(detail::str("Device: expected 'cpu', 'cuda[:N]' or 'meta', got '", spec, "'"));
  if (colon != std::string::npos) {
    MG_CHECK(type == DeviceType::CUDA, ValueError, "Device: only cuda takes an index, got '", spec, "'");
    try {
      size_t used = 0;
      index = std::stoi(spec.substr(colon + 1), &used);
      MG_CHECK(used == spec.size() - colon - 1 && index >= 0, ValueError, "");
    } catch (const std::exception&) {
      throw ValueError(detail::str("Device: expected a non-negative index after 'cuda:', got '", spec, "'"));
    }
  }
}

std::string Device::str() const {
  switch (type) {
    case DeviceType::CPU:
      return "cpu";
    case DeviceType::Meta:
      return "meta";
    case DeviceType::CUDA:
      return "cuda:" + std::to_string(index);
  }
  return "?";
}

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

bool cuda_built() { return cuda::built(); }
int cuda_device_count() { return cuda::device_count(); }
bool cuda_available() { return cuda_device_count() > 0; }

void check_device_usable(const Device& d) {
  if (!d.is_cuda()) return;
  MG_CHECK(cuda_built(), DeviceError, "device ", d,
           ": memgrad was built without CUDA (configure with -DMG_CUDA=ON and nvcc on PATH)");
  int n = cuda_device_count();
  MG_CHECK(n > 0, DeviceError, "device ", d, ": no CUDA device is available (", cuda::last_error(), ")");
  MG_CHECK(d.index < n, DeviceError, "device ", d, ": expected an index below ", n, ", got ", d.index);
}

}  // namespace mg
