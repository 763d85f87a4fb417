// The CPU bin-edges stage (edges_cpu.cpp), hooked into CpuBackend (histogram_cpu.cpp) for edges_bodies.h.
#pragma once

#include "../common/edge_binning.h"

namespace dsmhist {

// Writes the flat bin of points [p.first_point, + p.points) to p.out, over torch's intra-op thread pool.
void edge_bins_cpu(const EdgeBinParams& p);

}  // namespace dsmhist
