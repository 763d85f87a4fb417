// Tier "global": atomics straight into the destination. Two shortcuts keep skewed data off one address, where global
// atomics serialise (197 ms for 2^28 values of one bin on the H100, 44 ms for Zipf at 1M bins; 35 ms for Zipf
// float32 weights; benchmarks/NOTES.md): a thread's consecutive values of one bin are added as one run, and each block
// keeps a small direct-mapped cache of bins in shared memory (HotBinCache), claimed by the first bin that lands in a
// slot, so a hot bin is counted (or summed) in shared memory and reaches the output once per block.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "hot_bin_cache.cuh"
#include "policies.cuh"
#include "tier_host.h"
#include "traversal.cuh"

namespace dsmhist {
namespace global_atomic_tier {

// The kernel variant (TierKernelVariants) of the weighted float sums' claim-on-repeat body, for long weighted float
// sums (shape): its cache claims a slot on a bin's second add in the block, and each thread loads
// kGlobalSumsVectorsInFlight vectors at a time.
constexpr int kClaimOnRepeatBody = 1;

// The tier's launch arguments: none (no shared-memory bins to flush or store; its kernels take the launcher's second
// parameter all the same).
struct Launch {};

template <typename T, typename Policy, int kBody = 0>
__global__ void __launch_bounds__(kGlobalThreads) kernel(const HistogramParams p, const Launch /*launch*/) {
  constexpr bool kClaimOnRepeat = kBody == kClaimOnRepeatBody;
  using Acc = typename Policy::Acc;
  constexpr bool kCounts = std::is_same<Policy, detail::CountPolicy>::value;
  using Cache = HotBinCache<Policy, kClaimOnRepeat>;
  const Binner<T> binner(p);
  Cache cache(detail::shared_bins<Acc>(),
              p.output_rows() * p.bins < int64_t(Cache::kEmpty) &&
                  (!kCounts || most_elements_per_worker(p.rows, p.row_length, p.segments_per_row, gridDim.x) <=
                                   int64_t(UINT32_MAX)));
  __syncthreads();  // every slot must be empty before any thread claims one
  const auto add_cached = [&](int64_t flat_bin, Acc total) { cache.add(p, flat_bin, total); };
  if constexpr (kCounts) {
    int64_t run_bin = -1;
    uint32_t run_length = 0;
    detail::for_each_item<T>(
        p, Flushing{}, blockIdx.x, gridDim.x, threadIdx.x, blockDim.x,
        [&](const detail::ItemSpan<T>& span, T value, int64_t) {
          const int64_t bin = binner(value);
          if (bin < 0) return;
          const int64_t flat_bin = span.output_row * p.bins + bin;
          if (flat_bin == run_bin && run_length != UINT32_MAX) {
            ++run_length;
            return;
          }
          if (run_length != 0) add_cached(run_bin, run_length);
          run_bin = flat_bin;
          run_length = 1;
        },
        [] {}, [](int64_t) {});
    if (run_length != 0) add_cached(run_bin, run_length);
  } else {
    // A thread's consecutive contributions to one bin add once, and a warp whose last runs are all of one bin once.
    // with_weights (std::bool_constant): float32 weights loaded beside their values (for_each_element).
    const auto sum_values = [&](auto with_weights) {
      detail::RunMerger<Policy, int64_t> run;
      detail::for_each_item<T, kClaimOnRepeat ? kGlobalSumsVectorsInFlight : kVectorsInFlight,
                            decltype(with_weights)::value>(
          p, Flushing{}, blockIdx.x, gridDim.x, threadIdx.x, blockDim.x,
          [&](const detail::ItemSpan<T>& span, T value, int64_t weight_offset, auto... weight) {
            const int64_t bin = binner(value);
            if (bin < 0) return;
            const int64_t flat_bin = span.output_row * p.bins + bin;
            const Acc add = Policy::contribution(p, flat_bin, weight_offset, weight...);
            if (add != Acc(0)) run.push(flat_bin, add, add_cached);
          },
          [] {}, [](int64_t) {});
      run.emit_warp(add_cached);
    };
    // The plain body of float sums (calls too short for claim on repeat) keeps loading weights one by one: loaded with
    // their values they cost it 26 registers, and 3-4% at 2^20 values over 65536 and 1M bins (H200, 2026-11-26).
    constexpr bool kPlainFloatSums = !kClaimOnRepeat && (std::is_same<Policy, detail::WeightPolicy<float>>::value ||
                                                         std::is_same<Policy, detail::WeightPolicy<double>>::value);
    detail::with_weights_loaded<Policy, !kPlainFloatSums>(p, sum_values);
  }
  __syncthreads();  // every add into the cache must land before it is flushed
  cache.flush(p);
}

// Fits any bin count: the output is the only state, beside a cache of hot bins per block (HotBinCache): a tag and a
// sum of the accumulator per slot.
inline PlanStatus fit(const TierContext& ctx, bool /*automatic*/, HistogramPlan* plan) {
  plan->tier = Tier::kGlobal;
  plan->cluster_size = 1;
  plan->threads = kGlobalThreads;
  plan->bins_per_block = 0;
  plan->shared_bytes = hot_bin_cache_bytes(accumulator_bytes(ctx.request.acc));
  return PlanStatus::fits();
}

// No block state: as many blocks of the plan's size as fill the SMs. The kernel adds straight into the output, so it
// never stores rows (the output is zeroed first unless accumulating).
inline cudaError_t shape(const HistogramParams& p, const TierContext& ctx, const HistogramPlan& plan, AccKind acc,
                         bool /*may_store*/, LaunchShape* shape) {
  shape_stateless(p, ctx.caps, plan.threads, shape, kGlobalMinElementsPerThread);
  // The claim-on-repeat body where the kernel set holds it (weighted float sums) and the threads take enough elements
  // to repay it (tuning.h, kGlobalSumsClaimOnRepeatMinPerThread). `ctx.kernels` are the pass's (`acc`'s).
  const int64_t per_thread =
      ceil_div(most_elements_per_worker(p.rows, p.row_length, shape->segments, shape->grid), plan.threads);
  const bool repeat = ctx.kernels.tier_kernel(Tier::kGlobal, kClaimOnRepeatBody) != nullptr &&
                      per_thread >= kGlobalSumsClaimOnRepeatMinPerThread;
  shape->kernel_variant = repeat ? kClaimOnRepeatBody : 0;
  // The pass's accumulator (the deterministic sum runs two).
  shape->shared_bytes = hot_bin_cache_bytes(accumulator_bytes(acc), repeat);
  shape->args.set(Launch{});
  return cudaSuccess;
}

// One kernel, no workspace: the common launch.
constexpr CustomLaunch custom_launch{};

}  // namespace global_atomic_tier

// The claim-on-repeat body exists for weighted float sums only.
template <typename T, typename Policy>
struct TierKernelVariants<Tier::kGlobal, T, Policy>
    : KernelBodies<std::is_same<Policy, detail::WeightPolicy<float>>::value ||
                       std::is_same<Policy, detail::WeightPolicy<double>>::value,
                   global_atomic_tier::kClaimOnRepeatBody> {};

}  // namespace dsmhist
