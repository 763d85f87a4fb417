// The CPU engine: what CpuBackend (histogram_cpu.cpp) runs, on torch's intra-op thread pool. The binning rule is
// the one the CUDA kernels use (common/binning.h). Three promises shape it:
//  - Memory: beyond the output, a call's scratch stays below scratch_budget() (cpu_parallel.h): max(4 MiB per
//    thread, 10% of the output). Private histograms are used only where they fit that; past it the threads split
//    the bins instead.
//  - Determinism: weighted sums are bitwise identical whatever the thread count (cpu_sum.cpp); counts are integers.
//  - Speed: 8- and 16-bit inputs are counted per raw bit pattern and mapped to bins once per call (cpu_scan.h).
#pragma once

#include "../common/call.h"

namespace dsmhist {
namespace cpu {

// Every op that writes histograms: p's rows into p.output (added to it when p.accumulate). With
// find_data_range and no p.device_range, the range is first taken from the data (torch.histc's rule).
void histogram(HistogramParams& p, bool find_data_range);

// The range pass: the finite min and max of p.input, as the two order-preserving keys of encode_data_range, to
// p.keys.
void finite_range_keys(const RangeParams& p);

// Each element's bin (-1: dropped) into p.output, an int64 tensor of input's shape addressed by weight offsets.
void bin_indices(HistogramParams& p, bool find_data_range);

// The engine's own parts, one file each: counts into an integer output (cpu_count.cpp), sums into a floating one
// (cpu_sum.cpp), the data's range into p.lo / p.hi (cpu_range.cpp).
void count_histogram(const HistogramParams& p);
void sum_histogram(const HistogramParams& p);
void set_data_range(HistogramParams& p);

}  // namespace cpu
}  // namespace dsmhist
