// Kernel instantiations for floating inputs (split from the integer ones so the two compile in parallel).
#include "histogram.cuh"

namespace dsmhist {
template KernelSet kernel_set_for<Half16>(AccKind);
template KernelSet kernel_set_for<BFloat16>(AccKind);
template KernelSet kernel_set_for<float>(AccKind);
template KernelSet kernel_set_for<double>(AccKind);
}  // namespace dsmhist
