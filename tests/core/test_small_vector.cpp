// SmallVector (core/small_vector.h), the type of Shape and Strides and of a node's lists: checked
// against std::vector as the reference, on both sides of the inline/heap boundary, with an element
// type that counts its owners (so a leaked or doubly destroyed element shows).
#include <doctest/doctest.h>

#include <iterator>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <memgrad/memgrad.h>

using mg::SmallVector;

namespace {
using Small = SmallVector<int64_t, 4>;
using Ref = std::vector<int64_t>;

Small iota(int64_t n) {
  Small v;
  for (int64_t i = 0; i < n; ++i) v.push_back(i);
  return v;
}
Ref to_ref(const Small& v) { return Ref(v.begin(), v.end()); }
}  // namespace

TEST_CASE("small_vector: inline up to N elements, on the heap beyond, in order") {
  Small v;
  CHECK(v.empty());
  CHECK(v.is_inline());
  CHECK(v.capacity() == 4);
  for (int64_t i = 0; i < 4; ++i) v.push_back(i * 10);
  CHECK(v.is_inline());
  CHECK(to_ref(v) == Ref{0, 10, 20, 30});
  v.push_back(40);
  CHECK_FALSE(v.is_inline());
  CHECK(v.capacity() >= 5);
  CHECK(to_ref(v) == Ref{0, 10, 20, 30, 40});
  CHECK(v.front() == 0);
  CHECK(v.back() == 40);
  CHECK(v.at(4) == 40);
  CHECK_THROWS_AS(v.at(5), std::out_of_range);
  CHECK(v.data() == &v[0]);
  CHECK(Ref(v.rbegin(), v.rend()) == Ref{40, 30, 20, 10, 0});
  v.pop_back();
  v.pop_back();
  CHECK(to_ref(v) == Ref{0, 10, 20});
  v.clear();
  CHECK(v.empty());
  // Shape keeps kInlineDims dims inline.
  mg::Shape s{1, 2, 3, 4, 5, 6};
  CHECK(s.is_inline());
  s.push_back(7);
  CHECK_FALSE(s.is_inline());
  CHECK(mg::shape_str(s) == "[1, 2, 3, 4, 5, 6, 7]");
  CHECK(mg::numel_of(s) == 5040);
}

TEST_CASE("small_vector: constructors as std::vector's") {
  CHECK(to_ref(Small(3)) == Ref{0, 0, 0});
  CHECK(to_ref(Small(6, 7)) == Ref(6, 7));
  CHECK(to_ref(Small(size_t(2), int64_t(5))) == Ref{5, 5});
  CHECK(to_ref(Small{2, 5}) == Ref{2, 5});  // a list, not (count, value)
  const Ref r{1, 2, 3, 4, 5, 6};
  CHECK(to_ref(Small(r.begin() + 1, r.end())) == Ref{2, 3, 4, 5, 6});
  std::istringstream in("7 8 9 10 11");  // an input iterator: no size known in advance
  CHECK(to_ref(Small(std::istream_iterator<int64_t>(in), std::istream_iterator<int64_t>())) == Ref{7, 8, 9, 10, 11});
  Small v;
  v = {3, 2, 1};
  CHECK(to_ref(v) == Ref{3, 2, 1});
  v.assign(5, 9);
  CHECK(to_ref(v) == Ref(5, 9));
  v.assign({4});
  CHECK(to_ref(v) == Ref{4});
}

TEST_CASE("small_vector: insert and erase at both ends, inline and spilled") {
  for (int64_t n : {0, 1, 3, 4, 5, 9}) {
    CAPTURE(n);
    Small v = iota(n);
    Ref r = to_ref(v);
    v.insert(v.begin(), -1);
    r.insert(r.begin(), -1);
    CHECK(to_ref(v) == r);
    v.insert(v.end(), 100);
    r.insert(r.end(), 100);
    CHECK(to_ref(v) == r);
    auto it = v.insert(v.begin() + 1, {7, 8});
    r.insert(r.begin() + 1, {7, 8});
    CHECK(to_ref(v) == r);
    CHECK(it == v.begin() + 1);
    v.insert(v.end(), size_t(3), 5);
    r.insert(r.end(), size_t(3), 5);
    CHECK(to_ref(v) == r);
    it = v.erase(v.begin());
    r.erase(r.begin());
    CHECK(it == v.begin());
    CHECK(to_ref(v) == r);
    it = v.erase(v.end() - 1);
    r.erase(r.end() - 1);
    CHECK(it == v.end());
    CHECK(to_ref(v) == r);
    it = v.erase(v.begin() + 1, v.end() - 1);
    r.erase(r.begin() + 1, r.end() - 1);
    CHECK(to_ref(v) == r);
    CHECK(it == v.end() - 1);
    v.erase(v.begin(), v.end());
    CHECK(v.empty());
  }
}

TEST_CASE("small_vector: an argument that is one of its own elements survives growth") {
  Small v{1, 2, 3, 4};
  v.insert(v.begin(), v.back());  // full: growing moves the elements, the copy is made first
  CHECK(to_ref(v) == Ref{4, 1, 2, 3, 4});
  v.push_back(v[0]);
  v.resize(9, v[1]);  // grows again
  CHECK(to_ref(v) == Ref{4, 1, 2, 3, 4, 4, 1, 1, 1});
  v.insert(v.begin() + 2, v.begin(), v.begin() + 3);  // a range of its own
  CHECK(to_ref(v) == Ref{4, 1, 4, 1, 2, 2, 3, 4, 4, 1, 1, 1});
  Small w{1, 2, 3, 4};
  w.push_back(w[3]);
  CHECK(to_ref(w) == Ref{1, 2, 3, 4, 4});
}

TEST_CASE("small_vector: copies and moves across the inline/heap boundary") {
  for (int64_t n : {0, 2, 4, 5, 12}) {
    CAPTURE(n);
    const Small src = iota(n);
    Small copy(src);
    CHECK(copy == src);
    CHECK(copy.data() != src.data());
    Small moved(std::move(copy));
    CHECK(moved == src);
    CHECK(copy.empty());  // NOLINT(bugprone-use-after-move): a moved-from vector is left empty
    CHECK(copy.is_inline());
    copy.push_back(1);  // and usable
    CHECK(to_ref(copy) == Ref{1});
    for (int64_t m : {0, 3, 4, 6}) {  // assigned over a vector of each kind
      CAPTURE(m);
      Small a = iota(m), b = iota(m);
      a = src;
      CHECK(a == src);
      const int64_t* heap = moved.is_inline() ? nullptr : moved.data();
      Small keep(moved);
      b = std::move(moved);
      CHECK(b == src);
      if (heap) CHECK(b.data() == heap);  // a heap block is taken, not copied
      moved = std::move(keep);
      const Small& self = a;
      a = self;  // self-assignment leaves it unchanged
      CHECK(a == src);
      a.swap(b);
      CHECK(a == src);
      CHECK(b == src);
    }
  }
}

TEST_CASE("small_vector: converts from and to std::vector, compares like it") {
  const Ref r{1, 2, 3, 4, 5, 6, 7};
  Small v = r;  // spilled
  CHECK(to_ref(v) == r);
  Ref back = v;
  CHECK(back == r);
  mg::Shape s = Ref{2, 3};
  CHECK(s == Ref{2, 3});
  CHECK(Ref{2, 3} == s);
  CHECK(s != Ref{2, 3, 1});
  CHECK(s < mg::Shape{2, 4});
  CHECK(mg::Shape{2} < s);
  CHECK(s <= s);
  CHECK(s >= s);
  CHECK_FALSE(s > s);
  // A Shape passes where a std::vector<int64_t> is taken, and the reverse.
  auto take_vector = [](const Ref& x) { return x.size(); };
  auto take_shape = [](const mg::Shape& x) { return x.size(); };
  CHECK(take_vector(s) == 2);
  CHECK(take_shape(r) == 7);
  CHECK(mg::zeros(Ref{2, 3}).shape() == Ref{2, 3});
  CHECK(mg::zeros({2, 3}).sum(Ref(mg::Shape{1})).shape() == mg::Shape{2});
}

TEST_CASE("small_vector: elements with owners are each destroyed exactly once") {
  auto owned = std::make_shared<int>(0);
  {
    SmallVector<std::shared_ptr<int>, 2> v;
    for (int i = 0; i < 5; ++i) v.push_back(owned);
    CHECK(owned.use_count() == 6);
    v.erase(v.begin() + 1);
    v.insert(v.begin(), owned);
    CHECK(owned.use_count() == 6);
    auto w = v;
    CHECK(owned.use_count() == 11);
    w.resize(1);
    CHECK(owned.use_count() == 7);
    auto x = std::move(w);  // inline: moved element by element
    CHECK(owned.use_count() == 7);
    x = std::move(v);  // heap: the block is taken
    CHECK(owned.use_count() == 6);
    x.pop_back();
    x.emplace_back(std::make_shared<int>(1));
    CHECK(*x.back() == 1);
    CHECK(owned.use_count() == 5);
  }
  CHECK(owned.use_count() == 1);
}

TEST_CASE("small_vector: a random sequence of changes matches std::vector") {
  std::mt19937 rng(18);
  Small v;
  Ref r;
  auto pick = [&](size_t n) { return size_t(std::uniform_int_distribution<size_t>(0, n)(rng)); };
  for (int step = 0; step < 4000; ++step) {
    const int64_t x = int64_t(rng() % 1000);
    switch (rng() % 9) {
      case 0:
      case 1:
        v.push_back(x), r.push_back(x);
        break;
      case 2:
        if (!r.empty()) v.pop_back(), r.pop_back();
        break;
      case 3: {
        size_t i = pick(r.size());
        v.insert(v.begin() + i, x), r.insert(r.begin() + i, x);
        break;
      }
      case 4: {
        size_t i = pick(r.size()), n = pick(3);
        v.insert(v.begin() + i, n, x), r.insert(r.begin() + i, n, x);
        break;
      }
      case 5:
        if (!r.empty()) {
          size_t i = pick(r.size() - 1);
          v.erase(v.begin() + i), r.erase(r.begin() + i);
        }
        break;
      case 6: {
        size_t i = pick(r.size()), j = i + pick(r.size() - i);
        v.erase(v.begin() + i, v.begin() + j), r.erase(r.begin() + i, r.begin() + j);
        break;
      }
      case 7: {
        size_t n = pick(10);
        v.resize(n, x), r.resize(n, x);
        break;
      }
      default: {  // move-assigned a copy of itself, or one converted from the reference
        Small next = step % 2 ? Small(v) : Small(r);
        v = std::move(next);
        break;
      }
    }
    REQUIRE(to_ref(v) == r);
    REQUIRE(v.is_inline() == (v.capacity() == 4));
  }
}

// Issue 37: GCC 12, where it may move 32 bytes as one integer (any AVX-512 -march), stored this list
// as four 2^40: the copy of the initializer list became one 256-bit constant whose zero high word
// its broadcast check did not see (tests/compiler/audit_wide_broadcast.py). CMakeLists.txt adds
// -mmove-max=128 -mstore-max=128 where its probe finds that; this case fails without them.
namespace {
__attribute__((noinline)) Ref shape_of(const mg::Shape& s) { return Ref(s.begin(), s.end()); }
}  // namespace

TEST_CASE("small_vector: a list with zero high words holds what was written (issue 37)") {
  constexpr int64_t c = int64_t(1) << 40;
  CHECK(shape_of(mg::Shape{c, c, c, 0}) == Ref{c, c, c, 0});
  CHECK(shape_of(mg::Shape{c, c, 0, 0}) == Ref{c, c, 0, 0});
  CHECK(shape_of(mg::Shape{7, 7, 7, 7, 7, 0}) == Ref{7, 7, 7, 7, 7, 0});
  CHECK(to_ref(Small{c, c, c, 0}) == Ref{c, c, c, 0});
}
