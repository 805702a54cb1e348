// Host memory for what a device keeps off itself: the parameters, gradients and optimizer state that
// parameter offload (distributed/parameter_units.h, memgrad train --offload params) holds in host
// memory and brings to the device only while a module runs. It stands apart from the device's
// ledger, so that the ledger shows what the device itself holds, and has its own counts:
//   cuda  page-locked (pinned) host memory, so that copies to and from the device run asynchronously;
//   cpu   where host and device are the same memory: plain aligned memory kept outside the cpu ledger,
//         so that a --memory-limit binds on the device side alone, as a GPU's would;
//   meta  no bytes, as everything on meta: a plan counts the host side too.
//
//   { HostMemoryScope host(device);            // tensors made here on host_device(device) ...
//     state = zeros({n}, host_device(device)); // ... live in the host memory of `device`
//   }
// Byte counts are rounded to 512 B per tensor, as the ledger's.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>

#include <memgrad/core/memory.h>

namespace mg {

// The device a device's host memory is on: cpu for cpu and cuda, meta for meta.
Device host_device(const Device& served);

// On this thread, storages allocated on host_device(served) while the scope lives come from the
// host memory of `served`. Scopes nest; the innermost wins.
class HostMemoryScope {
 public:
  explicit HostMemoryScope(const Device& served);
  ~HostMemoryScope();
  HostMemoryScope(const HostMemoryScope&) = delete;
  HostMemoryScope& operator=(const HostMemoryScope&) = delete;

 private:
  const void* previous_;
};

// The host memory of one device: bytes held now by category and in all, and the peak since the last
// reset_host_peak (or the first allocation).
struct HostMemoryStats {
  int64_t allocated = 0, peak = 0;
  CategoryBytes by_category{};
  int64_t category(Category c) const { return by_category[size_t(c)]; }
};
HostMemoryStats host_memory_stats(const Device& served);
void reset_host_peak(const Device& served);

namespace detail {
// Whether the storage constructor, allocating on `d`, is inside a HostMemoryScope for it.
bool in_host_memory(const Device& d);
// Bytes of the innermost scope's host memory under `category` (the storage's deleter set in `deleter`).
void* host_allocate(size_t nbytes, Category category, std::function<void(void*)>* deleter);
}  // namespace detail

}  // namespace mg
