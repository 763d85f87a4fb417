// Between the launcher (launch.cu) and the deterministic path (fixed_point.cu): one pass of the planned tier.
#pragma once

#include <cuda_runtime.h>

#include "device_caps.h"
#include "kernels.h"

namespace dsmhist {

// Shapes and launches the call's planned tier with the kernels of `acc` (a pass of its own, not the call's prepared
// one) on `stream`. `may_store`: the tier may store whole output rows instead of adding into them;
// `zero_unstored_output`: zero the output first unless the shape stores it.
cudaError_t run_planned_tier(const HistogramParams& p, const PreparedCall& call, AccKind acc, bool may_store,
                             bool zero_unstored_output, cudaStream_t stream);

// The deterministic weighted sum (AccKind::kFixed): fixed_point.cu.
cudaError_t launch_fixed_point_histogram(const HistogramParams& p, const PreparedCall& call, cudaStream_t stream);

}  // namespace dsmhist
