// The deterministic weighted sum (under torch.use_deterministic_algorithms(True)): three order-independent steps, the
// largest weight exponent of every bin, the fixed-point sums in that bin's unit (both passes run the planned tier
// with their own accumulation policy), then one rounding per bin to the output dtype. See DeterministicScratch.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "../common/binning.h"
#include "../common/call.h"
#include "device_caps.h"
#include "kernels.h"
#include "tier_launch.h"

namespace dsmhist {

namespace {

// The deterministic sum's last step: fixed-point sums (and the flags of non-finite weights) to the output dtype,
// added to the output's values for histogram_add_. One rounding per bin, independent of any order.
__global__ void __launch_bounds__(256) fixed_point_finalize_kernel(const HistogramParams p) {
  const int64_t total = p.output_rows() * p.bins;
  const DeterministicScratch& s = p.deterministic;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const unsigned int seen = s.specials[i];
    double value;
    if ((seen & kSeenNaN) || ((seen & kSeenPosInf) && (seen & kSeenNegInf))) {
      value = __longlong_as_double(0x7ff8000000000000ll);
    } else if (seen & kSeenPosInf) {
      value = __longlong_as_double(0x7ff0000000000000ll);
    } else if (seen & kSeenNegInf) {
      value = __longlong_as_double(static_cast<long long>(0xfff0000000000000ull));
    } else {
      const unsigned int code = s.exponents[i];
      value = code == 0 ? 0.0
                        : ldexp(static_cast<double>(static_cast<long long>(s.sums[i])),
                                -fixed_point_shift(code, s.count_bits));
    }
    if (p.output_type == OutputType::kFloat64) {
      double* out = static_cast<double*>(p.output) + i;
      *out = p.accumulate ? *out + value : value;
    } else {
      float* out = static_cast<float*>(p.output) + i;
      *out = static_cast<float>(p.accumulate ? static_cast<double>(*out) + value : value);
    }
  }
}

}  // namespace

int64_t deterministic_scratch_bytes(int64_t output_bins) { return output_bins * 16; }

cudaError_t launch_fixed_point_histogram(const HistogramParams& p, const PreparedCall& call, cudaStream_t stream) {
  HistogramParams params = p;
  const int64_t scratch_bins = p.output_rows() * p.bins;
  DeterministicScratch& s = params.deterministic;
  s.exponents = reinterpret_cast<unsigned int*>(s.sums + scratch_bins);
  s.specials = s.exponents + scratch_bins;
  const int64_t most_terms = p.output_row_stride == 0 ? p.elements() : p.row_length;
  s.count_bits = 0;
  while ((int64_t(1) << s.count_bits) < most_terms) ++s.count_bits;
  cudaError_t err = cudaMemsetAsync(s.sums, 0, static_cast<size_t>(deterministic_scratch_bytes(scratch_bins)), stream);
  if (err != cudaSuccess) return err;
  for (const AccKind pass : {AccKind::kExponent, AccKind::kFixed}) {
    err = run_planned_tier(params, call, pass, /*may_store=*/false, /*zero_unstored_output=*/false, stream);
    if (err != cudaSuccess) return err;
  }
  void* args[] = {&params};
  const int64_t grid = std::min<int64_t>((scratch_bins + 255) / 256, int64_t(call.caps.sm_count) * 8);
  return cudaLaunchKernel(reinterpret_cast<const void*>(&fixed_point_finalize_kernel),
                          dim3(static_cast<unsigned>(grid)), dim3(256), args, 0, stream);
}

}  // namespace dsmhist
