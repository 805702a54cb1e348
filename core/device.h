// Devices: cpu, cuda:N and meta (shapes and dtypes only; no bytes are touched).
#pragma once
#include <iosfwd>
#include <string>

namespace mg {

enum class DeviceType : uint8_t { CPU, CUDA, Meta };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;  // meaningful for CUDA only

  Device() = default;
  Device(DeviceType t, int i = 0) : type(t), index(t == DeviceType::CUDA ? i : 0) {}
  Device(const char* spec) : Device(std::string(spec)) {}
  Device(const std::string& spec);  // "cpu", "cuda", "cuda:1", "meta"

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool is_meta() const { return type == DeviceType::Meta; }
  std::string str() const;
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

inline const Device kCPU{DeviceType::CPU};
inline const Device kMeta{DeviceType::Meta};
inline Device cuda_device(int index = 0) { return Device(DeviceType::CUDA, index); }

std::ostream& operator<<(std::ostream& os, const Device& d);

// The device type a meta run stands in for: meta allocates the scratch (Workspace) that this type's
// kernels would, so that a plan is made for a device. Per thread; cpu unless a guard says otherwise.
DeviceType meta_target();
class MetaTargetGuard {
 public:
  explicit MetaTargetGuard(DeviceType target);  // cpu or cuda
  ~MetaTargetGuard();
  MetaTargetGuard(const MetaTargetGuard&) = delete;
  MetaTargetGuard& operator=(const MetaTargetGuard&) = delete;

 private:
  DeviceType previous_;
};

// CUDA availability. Any failing device query counts as "no GPU".
bool cuda_built();        // compiled with MG_CUDA
int cuda_device_count();  // 0 when not built or no device
bool cuda_available();    // cuda_device_count() > 0
// Throws DeviceError saying why `d` cannot be used (not built / no device / bad index).
void check_device_usable(const Device& d);

}  // namespace mg
