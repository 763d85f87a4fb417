// Kernel instantiations for bfloat16 input. One translation unit per input type, so the build compiles them in
// parallel.
#include "kernel_set.cuh"

namespace dsmhist {
template KernelSet kernel_set_for<BFloat16>(AccKind);
}  // namespace dsmhist
