// The CPU device of every dsmhist op: CpuBackend, what op_bodies.h asks of a device once the checks, the output and
// the params are settled, handed to the engine (cpu_engine.h). Compiled with OpenMP, as every csrc/cpu file, so that
// torch's OpenMP backend really forks.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <ATen/Parallel.h>

#include <cstdio>

#include "../histogram_args.h"
#include "../launch_log.h"
#include "../op_bodies.h"
#include "cpu_engine.h"
#include "edges_cpu.h"

namespace dsmhist {

namespace {

struct CpuBackend {
  static constexpr int64_t kEdgeChunkPoints = ::dsmhist::kEdgeChunkPoints;
  static void check_device(const char* op, const at::Tensor& input) {
    TORCH_CHECK(input.device().is_cpu(), op, " (CPU): input must be on the CPU, got ", input.device());
  }
  static void histogram(const char* op, const HistogramArgs& args, HistogramParams& p, const at::Tensor&) {
    if (log_launches()) {
      std::fprintf(stderr, "torch_dsmhist launch: %s on cpu: tier cpu, %d threads, bins %lld, rows %lld x %lld\n", op,
                   at::get_num_threads(), static_cast<long long>(p.bins), static_cast<long long>(p.rows),
                   static_cast<long long>(p.row_length));
      std::fflush(stderr);
    }
    cpu::histogram(p, args.data_range);
  }
  static void finite_range(const HistogramArgs&, const RangeParams& p, const at::Tensor&) { cpu::finite_range_keys(p); }
  static void bin_indices(const HistogramArgs& args, HistogramParams& p, const at::Tensor&) {
    cpu::bin_indices(p, args.data_range);
  }
  static void check_edges(const char* op, const std::vector<at::Tensor>& edges, bool nd) {
    check_edges_sorted(op, edges, nd);
  }
  static void edge_bins(const EdgeBinParams& p, const at::Tensor&) { edge_bins_cpu(p); }
  static bool edge_histogram(const char*, const EdgeBinParams&, const EdgeCountParams&, const at::Tensor&) {
    return false;  // the two stages: the CPU engine counts the flat bins
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(dsmhist, CPU, m) { register_op_bodies<CpuBackend>(m); }

}  // namespace dsmhist
