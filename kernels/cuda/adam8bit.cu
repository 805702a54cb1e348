// bitsandbytes' 8-bit Adam (kernels/quantize8bit.h): one launch per tensor of adam8bit.cuh's kernels.
// Built without contracted multiply-adds (--fmad=false), so the results equal the CPU's bit for bit.
#include <memgrad/kernels/cuda/cuda_kernels.h>
#include <memgrad/kernels/cuda/adam8bit.cuh>
#include <memgrad/kernels/cuda/common.cuh>

namespace mg::cuda {

using namespace adam8bit;

void adam8bit_update(const TensorLists& lists, const std::vector<quant::Adam8bitScalars>& scalars) {
  Maps maps;
  maps.m = dynamic_map(true), maps.v = dynamic_map(false);
  for (size_t j = 0; j < scalars.size(); ++j) {
    const Tensor &p = lists[0][j], &g = lists[1][j];
    const int64_t n = p.numel();
    if (n == 0) continue;
    const Adam8bitCoeffs c = adam8bit_coeffs(scalars[j]);
    cudaStream_t stream = stream_for(p);
    dispatch_floating(p.dtype(), "Adam8bit", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (scalars[j].quantized) {
        const int64_t blocks = (n + kBlock - 1) / kBlock;
        quantized_kernel<T><<<int(std::min<int64_t>(blocks, 65535)), kBlock, 0, stream>>>(
            maps, dptr<T>(p), dptr<T>(g), dptr<uint8_t>(lists[2][j]), dptr<uint8_t>(lists[3][j]),
            dptr<float>(lists[4][j]), dptr<float>(lists[5][j]), n, c);
      } else {
        full_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(dptr<T>(p), dptr<T>(g), dptr<float>(lists[2][j]),
                                                             dptr<float>(lists[3][j]), n, c);
      }
      check_launch("Adam8bit");
    });
  }
}

}  // namespace mg::cuda
