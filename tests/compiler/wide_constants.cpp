// Constants GCC 12 miscompiles on x86-64 when it may move 32 or 64 bytes as one integer (the default
// of every AVX-512 -march, -march=native on such a CPU): a constant whose high 8-byte words are zero
// is stored as its first word broadcast to all of them, so SmallVector<int64_t, 6>{2^40, 2^40, 2^40,
// 0} holds four 2^40 (issue 37; tests/compiler/audit_wide_broadcast.py explains and finds them).
// CMakeLists.txt compiles and runs this with the build's flags before building anything, and adds
// -mmove-max=128 -mstore-max=128 (no integer moves wider than 16 bytes) where it fails; the ctest
// entry compiler_wide_constants runs it again, built as the tests are. Exit status: 0 right, 1 wrong.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>

#include <memgrad/core/small_vector.h>

namespace {

int wrong = 0;

// Keeps the compiler from knowing what `p` holds, so the check reads the bytes the store wrote.
void opaque(const void* p) { asm volatile("" : : "r"(p) : "memory"); }

template <class T, size_t N>
void check(const char* what, std::initializer_list<T> want) {
  alignas(64) T got[N];
  std::memcpy(got, want.begin(), sizeof got);  // one 32- or 64-byte constant move
  opaque(got);
  for (size_t i = 0; i < N; ++i)
    if (got[i] != want.begin()[i]) {
      std::printf("wrong: %s: element %zu is %lld, expected %lld\n", what, i, (long long)got[i],
                  (long long)want.begin()[i]);
      wrong = 1;
      return;
    }
}

__attribute__((noinline)) void check_shape(const mg::SmallVector<int64_t, 6>& s) {
  const int64_t want[4] = {int64_t(1) << 40, int64_t(1) << 40, int64_t(1) << 40, 0};
  if (s.size() != 4 || !std::equal(s.begin(), s.end(), want)) {
    std::printf("wrong: SmallVector<int64_t, 6>{2^40, 2^40, 2^40, 0} holds");
    for (int64_t d : s) std::printf(" %lld", (long long)d);
    std::printf("\n");
    wrong = 1;
  }
}

}  // namespace

int main() {
  constexpr int64_t c = int64_t(1) << 40;
  check<int64_t, 4>("int64 {c, c, c, 0}", {c, c, c, 0});
  check<int64_t, 4>("int64 {c, c, 0, 0}", {c, c, 0, 0});
  check<int32_t, 8>("int32 {7 x 6, 0, 0}", {7, 7, 7, 7, 7, 7, 0, 0});
  check<int8_t, 32>("int8 {3 x 16, 0 x 16}",
                    {3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  check<int64_t, 8>("int64 {5 x 7, 0}", {5, 5, 5, 5, 5, 5, 5, 0});
  check_shape({c, c, c, 0});
  if (!wrong) std::printf("right: every wide constant is stored as written\n");
  return wrong;
}
