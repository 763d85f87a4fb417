// Kernel instantiations for integer inputs (split from the floating ones so the two compile in parallel).
#include "histogram.cuh"

namespace dsmhist {
template KernelSet kernel_set_for<uint8_t>(AccKind);
template KernelSet kernel_set_for<int8_t>(AccKind);
template KernelSet kernel_set_for<int16_t>(AccKind);
template KernelSet kernel_set_for<int32_t>(AccKind);
template KernelSet kernel_set_for<int64_t>(AccKind);
}  // namespace dsmhist
