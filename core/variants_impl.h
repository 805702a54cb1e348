// The kernels' side of the variant registry (core/variants.h), private to the library: a kernel
// declares its variants once, as an enum with a name per enumerator, and reads the selection with
// one relaxed load on its hot path, comparing enumerators, never indices or strings.
//
//   enum class LayerNorm { Block, Warp };
//   const KernelVariant<LayerNorm> kLayerNorm(DeviceType::CUDA, "layer_norm",
//                                             {{LayerNorm::Block, "block"}, {LayerNorm::Warp, "warp"}});
//   ...
//   if (kLayerNorm == LayerNorm::Warp) ...
#pragma once
#include <atomic>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include <memgrad/core/device.h>

namespace mg {

namespace detail {
// Declares the variants of `op` on `d` (names in order, the first the default), selecting the one
// MG_KERNEL_VARIANTS names. Returns the selection as an index into `variants`; the reference stays
// valid for the process's life. Declaring `op` again replaces its names and selection.
const std::atomic<int>& register_kernel_variants(DeviceType d, const std::string& op,
                                                 const std::vector<std::string>& variants);
// Gives kernel_variant_detail its answers for `op` on `d`: describe(variant), called outside the
// registry's lock, on demand.
void describe_kernel_variants(DeviceType d, const std::string& op,
                              std::function<std::string(const std::string& variant)> describe);
// What is wrong with MG_KERNEL_VARIANTS's value `text` once every kernel has registered (a malformed
// item, a kernel without variants, a variant it does not have), or "" (check_environment).
std::string kernel_variants_env_error(const std::string& text);
}  // namespace detail

// One kernel's variants on one device type. Define it at namespace scope in the kernel's file: it
// registers while the library loads. A build may offer fewer enumerators than the enum has (conv2d
// without cuDNN offers only im2col); the first one listed is the default.
template <class E>
class KernelVariant {
 public:
  KernelVariant(DeviceType d, const std::string& op, std::initializer_list<std::pair<E, const char*>> variants)
      : values_(values_of(variants)), selected_(detail::register_kernel_variants(d, op, names_of(variants))) {}
  KernelVariant(const KernelVariant&) = delete;
  KernelVariant& operator=(const KernelVariant&) = delete;

  E get() const { return values_[size_t(selected_.load(std::memory_order_relaxed))]; }
  bool operator==(E v) const { return get() == v; }
  bool operator!=(E v) const { return get() != v; }

 private:
  static std::vector<E> values_of(std::initializer_list<std::pair<E, const char*>> l) {
    std::vector<E> r;
    for (const auto& [value, name] : l) r.push_back(value);
    return r;
  }
  static std::vector<std::string> names_of(std::initializer_list<std::pair<E, const char*>> l) {
    std::vector<std::string> r;
    for (const auto& [value, name] : l) r.push_back(name);
    return r;
  }

  std::vector<E> values_;
  const std::atomic<int>& selected_;
};

}  // namespace mg
