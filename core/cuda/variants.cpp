// The device-independent parts of the CUDA runtime API: record_stream, the TF32 switch and the
// kernel-variant names (the rest lives in core/cuda/runtime.cu, or no_cuda.cpp without CUDA).
#include <memgrad/core/cuda.h>

#include <atomic>

#include <memgrad/core/allocator.h>
#include <memgrad/core/storage.h>
#include <memgrad/core/variants.h>

namespace mg::cuda {

namespace {
std::atomic<bool> g_allow_tf32{false};
}  // namespace

void record_stream(const Tensor& t, const Stream& s) {
  MG_CHECK(t.defined(), ValueError, "record_stream: expected a defined tensor, got an undefined one");
  MG_CHECK(t.device().is_cuda(), DeviceError, "record_stream: expected a cuda tensor, got one on ", t.device());
  MG_CHECK(s.device() == t.device().index, DeviceError, "record_stream: expected a stream on ", t.device(),
           ", got one on cuda:", s.device());
  memory::record_stream(t.storage()->block(), s);  // null block (from_blob memory): nothing to do
}

void set_allow_tf32(bool allow) { g_allow_tf32 = allow; }
bool allow_tf32() { return g_allow_tf32; }

// The variant registry is core/variants.h's, for DeviceType::CUDA.
std::vector<std::string> kernel_ops() { return mg::kernel_ops(DeviceType::CUDA); }
std::vector<std::string> kernel_variants(const std::string& op) { return mg::kernel_variants(DeviceType::CUDA, op); }
void set_kernel_variant(const std::string& op, const std::string& variant) {
  mg::set_kernel_variant(DeviceType::CUDA, op, variant);
}
std::string kernel_variant(const std::string& op) { return mg::kernel_variant(DeviceType::CUDA, op); }

}  // namespace mg::cuda
