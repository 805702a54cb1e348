// Bytes that are not always resident: a storage whose bytes leave and come back (what ZeRO-3 and
// parameter offload build on), and the host memory a device keeps apart from its ledger.
#include <doctest/doctest.h>

#include <memgrad/core/host_memory.h>
#include <memgrad/memgrad.h>

using namespace mg;

TEST_CASE("storage: bytes released and reacquired; tensors over it, saved ones too, stay valid") {
  for (const Device& d : {kCPU, kMeta}) {
    INFO(d.str());
    const MemoryStats before = memory_stats(d);
    Tensor w;
    {
      MemoryScope scope(Category::Parameter, "w");
      w = ones({4, 32}, TensorOptions().device(d));
    }
    w.requires_grad_();
    Tensor x = ones({2, 4}, TensorOptions().device(d));
    Tensor y = matmul(x, w).sum();  // saves w for backward
    Storage& s = *w.storage();
    const uint64_t version = w.version();
    s.release_bytes();
    CHECK(!s.has_bytes());
    CHECK(memory_stats(d).category(Category::Parameter) == before.category(Category::Parameter));
    if (d.is_cpu()) CHECK_THROWS_AS(w.to_vector<float>(), ValueError);  // says the bytes are away
    CHECK_THROWS_AS(s.release_bytes(), ValueError);
    {
      MemoryScope scope(Category::Parameter, "w (gathered)");
      s.reacquire_bytes(Category::Other);
    }
    CHECK(s.has_bytes());
    CHECK(memory_by_owner(d).at("w (gathered)") == 512);
    Tensor(w).detach().fill_(1.0);  // refilled with what it held: not a change for autograd
    CHECK(w.version() != version);
    s.mark_refilled();
    CHECK(w.version() == version);
    y.backward();  // the saved w is found again
    if (d.is_cpu()) CHECK(x.to_vector<float>()[0] == 1.0f);
    CHECK_THROWS_AS(s.reacquire_bytes(Category::Other), ValueError);
    w.set_grad(Tensor());
  }
  // Wrapped memory is the caller's: it cannot leave.
  std::vector<float> mine(8);
  Tensor wrapped = make_tensor(std::make_shared<Storage>(mine.data(), 32, kCPU, nullptr), {8}, {1}, 0, kFloat32);
  CHECK_THROWS_AS(wrapped.storage()->release_bytes(), ValueError);
}

TEST_CASE("host memory: a device's offloaded tensors are counted apart from its ledger and its limit") {
  for (const Device& d : {kCPU, kMeta}) {
    INFO(d.str());
    CHECK(host_device(d) == (d.is_meta() ? kMeta : kCPU));
    const MemoryStats before = memory_stats(d);
    const HostMemoryStats host_before = host_memory_stats(d);
    reset_host_peak(d);
    {
      Tensor a, b;
      {
        HostMemoryScope host(d);
        MemoryScope scope(Category::OptimizerState, "m");
        a = zeros({1000}, TensorOptions().device(host_device(d)));  // 4000 B, counted as 4096
        {
          MemoryScope grads(Category::Gradient);
          b = empty({10}, TensorOptions().device(host_device(d)));
        }
      }
      Tensor c = zeros({10}, TensorOptions().device(d));  // outside the scope: the ledger's
      const HostMemoryStats h = host_memory_stats(d);
      CHECK(h.allocated - host_before.allocated == 4096 + 512);
      CHECK(h.category(Category::OptimizerState) - host_before.category(Category::OptimizerState) == 4096);
      CHECK(h.category(Category::Gradient) - host_before.category(Category::Gradient) == 512);
      CHECK(memory_stats(d).allocated - before.allocated == 512);  // c only
      if (d.is_cpu()) {
        a.add_(1.0);  // ordinary cpu tensors: every op works on them
        CHECK(a.sum().item<double>() == 1000.0);
      }
      b = Tensor();
      CHECK(host_memory_stats(d).allocated - host_before.allocated == 4096);
    }
    const HostMemoryStats after = host_memory_stats(d);
    CHECK(after.allocated == host_before.allocated);
    CHECK(after.peak - host_before.allocated == 4096 + 512);
  }
  // Under a memory limit smaller than the host tensors: they do not count against it.
  set_memory_limit(kCPU, 1 << 20);
  {
    HostMemoryScope host(kCPU);
    Tensor big = zeros({1 << 20});  // 4 MiB
    CHECK(host_memory_stats(kCPU).allocated >= 4 << 20);
  }
  set_memory_limit(kCPU, 0);
}
