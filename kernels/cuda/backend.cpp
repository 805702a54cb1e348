// The CUDA kernel table. The CUDA backend issue fills it in; until then every op on a cuda
// tensor raises NotImplementedError, while allocation and copies already work.
#include <memgrad/kernels/backend.h>

namespace mg::kernels {
const Backend& cuda_backend() {
  static const Backend b;
  return b;
}
}  // namespace mg::kernels
