// Kernel instantiations for float16 input. One translation unit per input type, so the build compiles them in parallel.
#include "histogram.cuh"

namespace dsmhist {
template KernelSet kernel_set_for<Half16>(AccKind);
}  // namespace dsmhist
