// Tensors: metadata, views that share storage without allocating, copies and conversions,
// factories, value access and printing.
#include <doctest/doctest.h>

#include <sstream>
#include <vector>

#include <memgrad/memgrad.h>

namespace {

int64_t allocated() { return mg::memory_stats(mg::kCPU).allocated; }

mg::Tensor iota(const mg::Shape& shape, mg::DType dtype = mg::kFloat32) {
  return mg::arange(mg::numel_of(shape), dtype).view(shape);
}

template <class T>
std::vector<T> vec(std::initializer_list<T> v) {
  return std::vector<T>(v);
}

std::string printed(const mg::Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

}  // namespace

TEST_CASE("tensor: shape, strides, offset") {
  auto x = mg::zeros({2, 3, 4});
  CHECK(x.shape() == mg::Shape{2, 3, 4});
  CHECK(x.strides() == mg::Strides{12, 4, 1});
  CHECK(x.dim() == 3);
  CHECK(x.numel() == 24);
  CHECK(x.size(-1) == 4);
  CHECK(x.stride(0) == 12);
  CHECK(x.storage_offset() == 0);
  CHECK(x.nbytes() == 96);
  CHECK(x.is_contiguous());
  CHECK(x.device() == mg::kCPU);
  CHECK(x.dtype() == mg::kFloat32);
  auto s = mg::scalar_tensor(3.0);
  CHECK(s.dim() == 0);
  CHECK(s.numel() == 1);
  CHECK(s.item<double>() == 3.0);
  auto e = mg::zeros({0, 5});
  CHECK(e.numel() == 0);
  CHECK(e.nbytes() == 0);
}

TEST_CASE("views share storage and allocate nothing") {
  auto x = iota({2, 3, 4});
  const int64_t before = allocated();
  auto same_storage = [&](const mg::Tensor& v) { return v.storage().get() == x.storage().get(); };

  auto v = x.view({6, 4});
  CHECK(same_storage(v));
  CHECK(v.strides() == mg::Strides{4, 1});
  auto r = x.reshape({4, -1});
  CHECK(same_storage(r));
  CHECK(r.shape() == mg::Shape{4, 6});

  auto tr = x.transpose(0, 2);
  CHECK(same_storage(tr));
  CHECK(tr.shape() == mg::Shape{4, 3, 2});
  CHECK(tr.strides() == mg::Strides{1, 4, 12});
  CHECK_FALSE(tr.is_contiguous());

  auto p = x.permute({2, 0, 1});
  CHECK(same_storage(p));
  CHECK(p.shape() == mg::Shape{4, 2, 3});
  CHECK(p.strides() == mg::Strides{1, 12, 4});
  CHECK(p.to_vector<float>()[3] == 12);  // p[0,1,0] = x[1,0,0]

  auto m = x.select(0, 1);  // [3, 4] starting at element 12
  CHECK(same_storage(m));
  CHECK(m.storage_offset() == 12);
  CHECK(m.t().shape() == mg::Shape{4, 3});
  CHECK(m.t().strides() == mg::Strides{1, 4});

  auto n = x.narrow(1, 1, 2);
  CHECK(same_storage(n));
  CHECK(n.shape() == mg::Shape{2, 2, 4});
  CHECK(n.storage_offset() == 4);

  auto sl = x.slice(2, 1, 4, 2);  // columns 1 and 3
  CHECK(same_storage(sl));
  CHECK(sl.shape() == mg::Shape{2, 3, 2});
  CHECK(sl.strides() == mg::Strides{12, 4, 2});
  CHECK(sl.storage_offset() == 1);
  CHECK(sl.select(0, 0).select(0, 0).to_vector<float>() == vec<float>({1, 3}));
  CHECK(x.slice(2, -3, 100).shape() == mg::Shape{2, 3, 3});  // negative start, end clamped

  auto col = mg::tensor(vec<float>({1, 2, 3}), {3, 1});
  const int64_t before_expand = allocated();
  auto ex = col.expand({2, 3, 4});
  CHECK(ex.shape() == mg::Shape{2, 3, 4});
  CHECK(ex.strides() == mg::Strides{0, 1, 0});
  CHECK(ex.storage().get() == col.storage().get());
  CHECK(ex.to_vector<float>()[5] == 2);  // ex[0][1][1]
  CHECK(col.expand({-1, 5}).shape() == mg::Shape{3, 5});
  CHECK(allocated() == before_expand);

  auto u = x.unsqueeze(1);
  CHECK(same_storage(u));
  CHECK(u.shape() == mg::Shape{2, 1, 3, 4});
  CHECK(x.unsqueeze(-1).shape() == mg::Shape{2, 3, 4, 1});
  CHECK(u.squeeze().shape() == mg::Shape{2, 3, 4});
  CHECK(same_storage(u.squeeze(1)));
  CHECK(u.squeeze(0).shape() == mg::Shape{2, 1, 3, 4});  // a dim of size 2 stays

  auto f = x.flatten();
  CHECK(same_storage(f));
  CHECK(f.shape() == mg::Shape{24});
  CHECK(x.flatten(1).shape() == mg::Shape{2, 12});
  CHECK(x.flatten(0, 1).shape() == mg::Shape{6, 4});

  CHECK(x.contiguous().is_same(x));
  CHECK(allocated() - before == 512);  // only `col` was allocated: 12 bytes rounded to 512
}

TEST_CASE("view values follow the strides") {
  auto x = iota({2, 3, 4});
  CHECK(x.permute({2, 0, 1}).to_vector<float>()[1] == 4);  // p[0][0][1] = x[0][1][0]
  CHECK(x.transpose(0, 1).select(0, 2).select(0, 1).to_vector<float>() == vec<float>({20, 21, 22, 23}));
  CHECK(x.select(2, 3).to_vector<float>() == vec<float>({3, 7, 11, 15, 19, 23}));
  CHECK(x.select(-1, -1).to_vector<float>() == vec<float>({3, 7, 11, 15, 19, 23}));
  CHECK(x.t().shape() == mg::Shape{3, 2, 4});  // t() swaps dims 0 and 1
}

TEST_CASE("strided copies and element-wise ops visit every element, on one thread or several") {
  // Short rows under several outer dims (the split of attention heads): the CPU loop steps row
  // indices like an odometer; sizes below and above the parallel grain, odd extents to carry through.
  for (auto dims :
       {std::vector<int64_t>{3, 5, 7, 11}, std::vector<int64_t>{8, 128, 4, 32}, std::vector<int64_t>{2, 3, 4097, 5}}) {
    CAPTURE(mg::shape_str(dims));
    auto x = iota(dims);
    auto p = x.permute({2, 0, 3, 1});  // p[a][b][c][d] = x[b][d][a][c]
    auto got = p.contiguous().to_vector<float>(), sum = (p + p.contiguous()).to_vector<float>();
    const int64_t A = dims[2], B = dims[0], C = dims[3], D = dims[1];
    size_t wrong = 0, i = 0;
    for (int64_t a = 0; a < A; ++a)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t d = 0; d < D; ++d, ++i) {
            const float want = float(((b * D + d) * A + a) * C + c);
            wrong += got[i] != want || sum[i] != 2 * want;
          }
    CHECK(wrong == 0);
  }
}

TEST_CASE("writes through a view are visible in the base") {
  auto x = mg::zeros({3, 4});
  x.select(1, 2).fill_(7);
  x.narrow(0, 2, 1).copy_(mg::tensor(vec<float>({1, 2, 3, 4})));
  x.slice(1, 0, 4, 3).select(0, 0).fill_(-1);
  CHECK(x.to_vector<float>() == vec<float>({-1, 0, 7, -1, 0, 0, 7, 0, 1, 2, 3, 4}));
  auto t = x.t();
  t.select(0, 1).fill_(5);  // column 1 of x
  CHECK(x.select(1, 1).to_vector<float>() == vec<float>({5, 5, 5}));
  CHECK(x.version() == t.version());  // one storage, one version counter
}

TEST_CASE("reshape copies only when a view is impossible") {
  auto x = iota({3, 4});
  auto t = x.t();
  CHECK_THROWS_AS(t.view({12}), mg::ShapeError);
  int64_t before = allocated();
  auto r = t.reshape({12});
  CHECK(r.storage().get() != x.storage().get());
  CHECK(allocated() - before == 512);
  CHECK(r.to_vector<float>() == vec<float>({0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  // A transposed tensor can still be viewed when only dims of size 1 move.
  auto c = iota({4, 1}).t();
  CHECK(c.view({4}).storage().get() == c.storage().get());
  // Merging dims that are contiguous with each other works on a narrowed tensor.
  auto nx = iota({4, 2, 3}).narrow(0, 1, 2);
  CHECK(nx.view({2, 6}).storage_offset() == 6);
}

TEST_CASE("contiguous, clone, to(dtype), to(meta)") {
  auto x = iota({2, 3});
  auto t = x.t();
  int64_t before = allocated();
  auto c = t.contiguous();
  CHECK(c.is_contiguous());
  CHECK(c.strides() == mg::Strides{2, 1});
  CHECK(c.to_vector<float>() == vec<float>({0, 3, 1, 4, 2, 5}));
  CHECK(allocated() - before == 512);

  auto k = x.clone();
  CHECK(k.storage().get() != x.storage().get());
  k.fill_(9);
  CHECK(x.to_vector<float>() == vec<float>({0, 1, 2, 3, 4, 5}));

  CHECK(x.to(mg::kFloat32).is_same(x));
  auto f = mg::tensor(vec<float>({2.7f, -2.7f, 0.0f, 0.5f}));
  CHECK(f.to(mg::kInt32).to_vector<int32_t>() == vec<int32_t>({2, -2, 0, 0}));  // truncates toward zero
  CHECK(f.to(mg::kBool).to_vector<bool>() == vec<bool>({true, true, false, true}));
  CHECK(f.to(mg::kFloat64).dtype() == mg::kFloat64);
  CHECK(f.to(mg::kFloat64).to_vector<double>()[0] == double(2.7f));
  CHECK(mg::tensor(vec<int64_t>({1, 0, -3})).to(mg::kFloat16).to_vector<float>() == vec<float>({1, 0, -3}));

  int64_t cpu_before = allocated(), meta_before = mg::memory_stats(mg::kMeta).allocated;
  auto m = x.to(mg::kMeta);
  CHECK(m.is_meta());
  CHECK(m.shape() == x.shape());
  CHECK(m.dtype() == mg::kFloat32);
  CHECK(allocated() == cpu_before);
  CHECK(mg::memory_stats(mg::kMeta).allocated - meta_before == 512);
  CHECK(x.to(mg::kMeta, mg::kFloat16).dtype() == mg::kFloat16);
}

TEST_CASE("factories") {
  CHECK(mg::zeros({2, 2}).to_vector<float>() == vec<float>({0, 0, 0, 0}));
  CHECK(mg::ones({3}, mg::kInt32).to_vector<int32_t>() == vec<int32_t>({1, 1, 1}));
  CHECK(mg::full({2}, 2.5, mg::kFloat64).to_vector<double>() == vec<double>({2.5, 2.5}));
  CHECK(mg::full({2}, true, mg::kBool).to_vector<bool>() == vec<bool>({true, true}));
  auto e = mg::empty({4, 5}, mg::kInt64);
  CHECK(e.shape() == mg::Shape{4, 5});
  CHECK(e.nbytes() == 160);
  CHECK(mg::zeros_like(e).dtype() == mg::kInt64);
  CHECK(mg::ones_like(e).to_vector<int64_t>()[19] == 1);
  CHECK(mg::full_like(e, 7).to_vector<int64_t>()[0] == 7);

  auto a = mg::arange(5);
  CHECK(a.dtype() == mg::kInt64);
  CHECK(a.to_vector<int64_t>() == vec<int64_t>({0, 1, 2, 3, 4}));
  CHECK(mg::arange(2, 11, 3).to_vector<int64_t>() == vec<int64_t>({2, 5, 8}));
  CHECK(mg::arange(10, 0, -3).to_vector<int64_t>() == vec<int64_t>({10, 7, 4, 1}));
  CHECK(mg::arange(0.0, 1.0, 0.25, mg::kFloat32).to_vector<float>() == vec<float>({0, 0.25, 0.5, 0.75}));
  CHECK(mg::arange(1.0, -1.0, -0.5, mg::kFloat64).to_vector<double>() == vec<double>({1, 0.5, 0, -0.5}));
  CHECK(mg::arange(3, 3).numel() == 0);

  CHECK(mg::linspace(-1, 1, 5).to_vector<float>() == vec<float>({-1, -0.5, 0, 0.5, 1}));
  CHECK(mg::linspace(2, 3, 1).to_vector<float>() == vec<float>({2}));
  CHECK(mg::linspace(0, 1, 0).numel() == 0);
  CHECK(mg::linspace(0, 10, 3, mg::kFloat64).to_vector<double>() == vec<double>({0, 5, 10}));

  CHECK(mg::eye(3).to_vector<float>() == vec<float>({1, 0, 0, 0, 1, 0, 0, 0, 1}));
  CHECK(mg::eye(2, mg::kInt32).to_vector<int32_t>() == vec<int32_t>({1, 0, 0, 1}));

  auto r = mg::rand({10, 10});
  CHECK(r.shape() == mg::Shape{10, 10});
  for (float v : r.to_vector<float>()) CHECK((v >= 0 && v < 1));
  CHECK(mg::randn({7}, mg::kFloat64).dtype() == mg::kFloat64);
  auto ri = mg::randint(-2, 3, {50});
  CHECK(ri.dtype() == mg::kInt64);
  for (auto v : ri.to_vector<int64_t>()) CHECK((v >= -2 && v < 3));
  CHECK(mg::randint(0, 4, {5}, mg::kInt32).dtype() == mg::kInt32);
  CHECK(mg::ones({2}, mg::TensorOptions().requires_grad()).requires_grad());
}

TEST_CASE("mg::tensor for each C++ type") {
  auto f = mg::tensor(vec<float>({1.5f, 2, 3, 4, 5, 6}), {2, 3});
  CHECK(f.dtype() == mg::kFloat32);
  CHECK(f.shape() == mg::Shape{2, 3});
  CHECK(f.data_ptr<float>()[0] == 1.5f);
  auto d = mg::tensor(vec<double>({0.1, 0.2}));
  CHECK(d.dtype() == mg::kFloat64);
  CHECK(d.shape() == mg::Shape{2});
  CHECK(d.data_ptr<double>()[0] == 0.1);
  auto i = mg::tensor(vec<int32_t>({-7, 8}));
  CHECK(i.dtype() == mg::kInt32);
  CHECK(i.data_ptr<int32_t>()[0] == -7);
  auto l = mg::tensor(vec<int64_t>({int64_t(1) << 40}));
  CHECK(l.dtype() == mg::kInt64);
  CHECK(l.shape() == mg::Shape{1});  // as libtorch: a vector of one value is 1-d
  CHECK(l.item<int64_t>() == int64_t(1) << 40);
  // A value alone makes a 0-d tensor, braced lists 1-d and 2-d ones (torch::tensor's shapes).
  auto s = mg::tensor(2.5);
  CHECK(s.dim() == 0);
  CHECK(s.dtype() == mg::kFloat64);
  CHECK(s.item<double>() == 2.5);
  CHECK(mg::tensor(int64_t(7)).shape() == mg::Shape{});
  auto one = mg::tensor({3.f});
  CHECK(one.shape() == mg::Shape{1});
  CHECK(one.dtype() == mg::kFloat32);
  auto list = mg::tensor({int64_t(1), int64_t(2), int64_t(3)});
  CHECK(list.shape() == mg::Shape{3});
  CHECK(list.to_vector<int64_t>() == vec<int64_t>({1, 2, 3}));
  auto rows = mg::tensor({{1.f, 2.f, 3.f}, {4.f, 5.f, 6.f}}, mg::kFloat64);
  CHECK(rows.shape() == mg::Shape{2, 3});
  CHECK(rows.dtype() == mg::kFloat64);
  CHECK(rows.to_vector<double>() == vec<double>({1, 2, 3, 4, 5, 6}));
  CHECK_THROWS_AS(mg::tensor({{1.f, 2.f}, {3.f}, {4.f, 5.f, 6.f}}), mg::ShapeError);  // rows of unequal length
  // int64 values beyond 2^53 are stored and read back exactly (not through a double).
  const int64_t odd = (int64_t(1) << 62) + 1;
  auto big = mg::tensor(vec<int64_t>({odd, -odd}));
  CHECK(big.to_vector<int64_t>() == vec<int64_t>({odd, -odd}));
  CHECK(big.select(0, 1).item<int64_t>() == -odd);
  CHECK(mg::full({1}, 7, mg::kInt64).item<int64_t>() == 7);
  auto b = mg::tensor(vec<bool>({true, false, true}));
  CHECK(b.dtype() == mg::kBool);
  CHECK(b.to_vector<bool>() == vec<bool>({true, false, true}));
  auto h = mg::tensor(vec<float>({1, 2}), {2, 1}, mg::kBFloat16);
  CHECK(h.dtype() == mg::kBFloat16);
  CHECK(h.shape() == mg::Shape{2, 1});
  CHECK(mg::tensor(vec<float>({1, 2}), {1, 2}, mg::kMeta).is_meta());
}

TEST_CASE("item, to_vector, data_ptr") {
  auto x = mg::tensor(vec<float>({1.75f, -2, 3, 4}), {2, 2});
  CHECK(x.select(0, 0).select(0, 0).item<float>() == 1.75f);
  CHECK(x.select(0, 0).select(0, 0).item<int>() == 1);
  CHECK(x.select(0, 0).select(0, 1).item<double>() == -2.0);
  CHECK_THROWS_AS(x.item<float>(), mg::ShapeError);
  CHECK(x.t().to_vector<int64_t>() == vec<int64_t>({1, 3, -2, 4}));
  CHECK(x.data_ptr<float>()[3] == 4);
  CHECK_THROWS_AS(x.data_ptr<double>(), mg::DTypeError);
  CHECK_THROWS_AS(x.data_ptr<int32_t>(), mg::DTypeError);
  CHECK_THROWS_WITH_AS(mg::ones({2}, mg::kInt64).data_ptr<int32_t>(),
                       doctest::Contains("data_ptr: expected the tensor's dtype int64"), mg::DTypeError);
  CHECK(x.select(0, 1).data_ptr<float>() == x.data_ptr<float>() + 2);  // the view's first element
}

TEST_CASE("from_blob wraps memory without copying or counting it") {
  std::vector<float> buf{1, 2, 3, 4, 5, 6};
  int deleted = 0;
  void* seen = nullptr;
  const int64_t before = allocated();
  const int64_t allocs = mg::memory_stats(mg::kCPU).num_allocs;
  {
    auto t = mg::from_blob(buf.data(), {2, 3}, {}, [&](void* p) { ++deleted, seen = p; });
    CHECK(allocated() == before);
    CHECK(mg::memory_stats(mg::kCPU).num_allocs == allocs);
    CHECK(t.data_ptr<float>() == buf.data());
    buf[4] = 50;
    CHECK(t.to_vector<float>()[4] == 50);
    t.select(0, 0).fill_(0);  // writes land in the caller's buffer
    CHECK(buf[0] == 0);
    auto v = t.t();
    t = mg::Tensor();
    CHECK(deleted == 0);                  // the view keeps the storage alive
    CHECK(v.to_vector<float>()[1] == 4);  // v[0][1] = t[1][0]
    auto copy_of_view = v;
    v = mg::Tensor();
    CHECK(deleted == 0);
  }
  CHECK(deleted == 1);
  CHECK(seen == buf.data());
  CHECK(allocated() == before);
  // Without a deleter nothing runs; the int type wraps too.
  std::vector<int32_t> ib{1, 2};
  auto ti = mg::from_blob(ib.data(), {2}, mg::kInt32);
  CHECK(ti.to_vector<int32_t>() == ib);
}

TEST_CASE("printing") {
  auto x = mg::tensor(vec<float>({1, 2.5f, -3, 4}), {2, 2});
  std::string s = printed(x);
  CHECK(s.find("tensor([[1, 2.5],") == 0);
  CHECK(s.find("[-3, 4]]") != std::string::npos);
  CHECK(s.find("shape=[2, 2]") != std::string::npos);
  CHECK(s.find("dtype=float32") != std::string::npos);
  CHECK(s.find("device") == std::string::npos);  // cpu is the default and not shown
  CHECK(printed(mg::arange(3)).find("dtype=int64") != std::string::npos);
  CHECK(printed(mg::scalar_tensor(2.0)) == "tensor(2, shape=[], dtype=float32)");
  CHECK(printed(mg::Tensor()) == "tensor(undefined)");

  auto big = mg::zeros({100, 100});
  std::string b = printed(big);
  CHECK(b.find("...") != std::string::npos);
  CHECK(b.size() < 1000);  // summarised: 10000 values are not all printed
  auto long1d = mg::arange(2000);
  std::string l = printed(long1d);
  CHECK(l.find("[0, 1, 2, ..., 1997, 1998, 1999]") != std::string::npos);

  auto m = mg::zeros({3, 4}, mg::kMeta);
  CHECK(printed(m) == "tensor(..., shape=[3, 4], dtype=float32, device='meta')");

  auto w = mg::ones({2}, mg::TensorOptions().requires_grad());
  CHECK(printed(w).find("requires_grad=true") != std::string::npos);
  auto y = w * w;
  CHECK(printed(y).find("grad_fn=mul") != std::string::npos);
}

TEST_CASE("arange infers its dtype from its arguments, as torch.arange") {
  CHECK(mg::arange(4).dtype() == mg::kInt64);
  CHECK(mg::arange(0, 4, 2).dtype() == mg::kInt64);
  auto f = mg::arange(0.0, 1.0, 0.25);  // was int64 zeros before the dtype was inferred
  CHECK(f.dtype() == mg::kFloat32);
  CHECK(f.to_vector<float>() == std::vector<float>{0.0f, 0.25f, 0.5f, 0.75f});
  CHECK(mg::arange(2.5).to_vector<float>() == std::vector<float>{0.0f, 1.0f, 2.0f});
}
