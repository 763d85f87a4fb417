// Accumulation policies: what an element adds and where, one struct per kind of sum. The tier kernels are written
// once against this interface and instantiated per policy (kernel_set.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "../common/binning.h"
#include "../common/call.h"

namespace dsmhist {
namespace detail {

// ----- Accumulation policies -------------------------------------------------------------------------------------
// contribution(): what an element adds to its bin (0: nothing), given its weight's offset or, where kTakesWeights,
// the float32 weight itself (loaded beside the value: for_each_element); combine(): two contributions to one bin as
// one (what adding both does); add_shared(): into a block's shared bins; add_global(): into the destination
// (atomically); store(): the one block that owns an output row writes a bin.

// Counts: 32-bit in shared memory, widened to int64 (or added as uint32 to int32) in the output.
struct CountPolicy {
  using Acc = uint32_t;
  static constexpr bool kMayStore = true;
  static constexpr bool kTakesWeights = false;
  __device__ static Acc contribution(const HistogramParams&, int64_t, int64_t) { return 1u; }
  __device__ static Acc combine(Acc a, Acc b) { return a + b; }
  __device__ static void add_shared(Acc* slot, Acc value) { atomicAdd(slot, value); }
  __device__ static void add_global(const HistogramParams& p, int64_t flat_bin, Acc value) {
    if (p.output_type == OutputType::kInt64) {
      atomicAdd(static_cast<unsigned long long*>(p.output) + flat_bin, static_cast<unsigned long long>(value));
    } else {
      atomicAdd(static_cast<unsigned int*>(p.output) + flat_bin, value);
    }
  }
  __device__ static void store(const HistogramParams& p, int64_t flat_bin, Acc value) {
    if (p.output_type == OutputType::kInt64) {
      unsigned long long* out = static_cast<unsigned long long*>(p.output) + flat_bin;
      *out = (p.accumulate ? *out : 0ull) + value;
    } else {
      unsigned int* out = static_cast<unsigned int*>(p.output) + flat_bin;
      *out = (p.accumulate ? *out : 0u) + value;
    }
  }
};

// Weight sums with floating-point atomics (fast; the order of additions, hence the rounding, varies run to run).
template <typename F>
struct WeightPolicy {
  using Acc = F;
  static constexpr bool kMayStore = true;
  static constexpr bool kTakesWeights = true;
  __device__ static Acc contribution(const HistogramParams& p, int64_t, int64_t weight_offset) {
    return load_weight<F>(p.weight, p.weight_type, weight_offset);
  }
  __device__ static Acc contribution(const HistogramParams&, int64_t, int64_t, float weight) {
    return static_cast<F>(weight);
  }
  __device__ static Acc combine(Acc a, Acc b) { return a + b; }
  __device__ static void add_shared(Acc* slot, Acc value) { atomicAdd(slot, value); }
  __device__ static void add_global(const HistogramParams& p, int64_t flat_bin, Acc value) {
    atomicAdd(static_cast<F*>(p.output) + flat_bin, value);
  }
  __device__ static void store(const HistogramParams& p, int64_t flat_bin, Acc value) {
    F* out = static_cast<F*>(p.output) + flat_bin;
    *out = (p.accumulate ? *out : F(0)) + value;
  }
};

// The contributions of a deterministic pass: Policy::of_weight(p, flat_bin, w) of the element's weight as a double,
// from its offset or from a float32 weight loaded beside the value.
template <typename Policy, typename Acc>
struct OfDoubleWeight {
  static constexpr bool kTakesWeights = true;
  __device__ static Acc contribution(const HistogramParams& p, int64_t flat_bin, int64_t weight_offset) {
    return Policy::of_weight(p, flat_bin, load_weight<double>(p.weight, p.weight_type, weight_offset));
  }
  __device__ static Acc contribution(const HistogramParams& p, int64_t flat_bin, int64_t, float weight) {
    return Policy::of_weight(p, flat_bin, static_cast<double>(weight));
  }
};

// Deterministic pass 1: the largest exponent code of each bin's finite nonzero weights (max is order-free); the
// non-finite weights only set flags, straight in global memory (they are rare, and their sum is decided by flags).
struct ExponentPolicy : OfDoubleWeight<ExponentPolicy, uint32_t> {
  using Acc = uint32_t;
  static constexpr bool kMayStore = false;
  __device__ static Acc of_weight(const HistogramParams& p, int64_t flat_bin, double w) {
    if (!is_finite_value(w)) {
      const unsigned int flag = w != w ? kSeenNaN : (w > 0 ? kSeenPosInf : kSeenNegInf);
      atomicOr(p.deterministic.specials + flat_bin, flag);
      return 0u;
    }
    return w == 0.0 ? 0u : exponent_code(w);
  }
  __device__ static Acc combine(Acc a, Acc b) { return a > b ? a : b; }
  __device__ static void add_shared(Acc* slot, Acc value) { atomicMax(slot, value); }
  __device__ static void add_global(const HistogramParams& p, int64_t flat_bin, Acc value) {
    atomicMax(p.deterministic.exponents + flat_bin, value);
  }
  __device__ static void store(const HistogramParams&, int64_t, Acc) {}
};

// Deterministic pass 2: each finite weight as the integer round(w * 2^shift) of its bin (pass 1 fixed the shift),
// summed as 64-bit integers with atomics (in shared memory as two 32-bit words), which give the same bits in any
// order.
struct FixedPointPolicy : OfDoubleWeight<FixedPointPolicy, unsigned long long> {
  using Acc = unsigned long long;
  static constexpr bool kMayStore = false;
  __device__ static int32_t shift_of(const HistogramParams& p, int64_t flat_bin) {
    return fixed_point_shift(__ldg(p.deterministic.exponents + flat_bin), p.deterministic.count_bits);
  }
  __device__ static Acc of_weight(const HistogramParams& p, int64_t flat_bin, double w) {
    if (!is_finite_value(w) || w == 0.0) return 0ull;
    return static_cast<unsigned long long>(__double2ll_rn(ldexp(w, shift_of(p, flat_bin))));
  }
  // A float32 weight loaded beside its value: the same integer as of_weight(double(w)), by integer shifts of its
  // significand (w * 2^shift is exact in a double wherever it rounds to a nonzero integer).
  __device__ static Acc contribution(const HistogramParams& p, int64_t flat_bin, int64_t, float weight) {
    const uint32_t bits = __float_as_uint(weight);
    const uint32_t biased = (bits >> 23) & 0xffu;
    if (biased == 0xffu || (bits & 0x7fffffffu) == 0) return 0ull;  // inf or NaN (pass 1 flagged it), or zero
    const uint32_t fraction = bits & 0x7fffffu;
    const uint64_t significand = biased == 0 ? fraction : (fraction | 0x800000u);
    // weight = significand * 2^(exponent), so the sum's integer is significand * 2^(exponent + shift), rounded
    const int32_t exponent = biased == 0 ? -149 : static_cast<int32_t>(biased) - 150;
    const int32_t left = exponent + shift_of(p, flat_bin);
    uint64_t magnitude;
    if (left >= 0) {
      magnitude = significand << left;  // below 2^62 by the choice of shift
    } else if (left < -25) {
      magnitude = 0;  // below 2^24 * 2^-26 = 1/4: rounds to 0
    } else {
      const uint32_t right = static_cast<uint32_t>(-left);
      const uint64_t quotient = significand >> right;
      const uint64_t remainder = significand & ((uint64_t(1) << right) - 1);
      const uint64_t half = uint64_t(1) << (right - 1);
      magnitude = quotient + ((remainder > half || (remainder == half && (quotient & 1))) ? 1 : 0);  // to even
    }
    return (bits >> 31) ? (0ull - magnitude) : magnitude;
  }
  using OfDoubleWeight<FixedPointPolicy, unsigned long long>::contribution;
  __device__ static Acc combine(Acc a, Acc b) { return a + b; }
  // Two native 32-bit adds, the low word's carry passed to the high word (the atomic returns the word it added to):
  // a 64-bit shared-memory add is a compare-and-swap loop on sm_90. The two words end as the exact 64-bit sum.
  __device__ static void add_shared(Acc* slot, Acc value) {
    unsigned int* words = reinterpret_cast<unsigned int*>(slot);
    const unsigned int low = static_cast<unsigned int>(value);
    const unsigned int before = atomicAdd(words, low);
    const unsigned int high = static_cast<unsigned int>(value >> 32) + (before + low < before ? 1u : 0u);
    if (high != 0u) atomicAdd(words + 1, high);
  }
  __device__ static void add_global(const HistogramParams& p, int64_t flat_bin, Acc value) {
    atomicAdd(p.deterministic.sums + flat_bin, value);
  }
  __device__ static void store(const HistogramParams&, int64_t, Acc) {}
};

// The 32 lanes' values combined (every lane gets the result); all lanes of the warp call it together.
template <typename Policy>
__device__ __forceinline__ typename Policy::Acc warp_combine(typename Policy::Acc value) {
  for (int offset = 16; offset > 0; offset /= 2) {
    value = Policy::combine(value, __shfl_xor_sync(0xffffffffu, value, offset));
  }
  return value;
}

// Runs body(std::true_type{}) where a launch's weights are loaded beside their values (for_each_element's
// kWithWeights: float32 weights of a policy that takes them, in a body that allows it), else body(std::false_type{}).
template <typename Policy, bool kAllowed = true, typename Body>
__device__ __forceinline__ void with_weights_loaded(const HistogramParams& p, Body&& body) {
  if constexpr (Policy::kTakesWeights && kAllowed) {
    if (p.weight_type == WeightType::kFloat32) return body(std::true_type{});
  }
  body(std::false_type{});
}

// A thread's consecutive contributions to one bin, added as one (weighted and deterministic sums). With one hot bin or
// sorted data every element would otherwise wait on one address: 354 ms for 2^28 float32 weights of one bin in tier
// global on the H100, against 2.7 ms uniform (benchmarks/NOTES.md). Counts pass straight through (kMerges is false):
// their tiers count runs their own way, or add each element in shared memory, where the increment is as cheap as the
// compare. `Key` names the bin where the adds go (a flat output bin, or a block's shared bin; never kNone);
// add(key, value) adds. No flag beside the key: the kernels run at their register limit, and one more live register
// cost a spill.
template <typename Policy, typename Key>
struct RunMerger {
  using Acc = typename Policy::Acc;
  static constexpr bool kMerges = !std::is_same<Policy, CountPolicy>::value;
  static constexpr Key kNone = static_cast<Key>(-1);  // no open run (bins are below 2^31, flat bins below 2^63)
  Key key = kNone;
  Acc total = Acc(0);

  template <typename Add>
  __device__ __forceinline__ void push(Key bin, Acc value, Add&& add) {
    if constexpr (!kMerges) {
      add(bin, value);
      return;
    }
    if (bin == key) {
      total = Policy::combine(total, value);
      return;
    }
    if (key != kNone) add(key, total);
    key = bin;
    total = value;
  }

  // Adds the open run; before any barrier that orders the adds (a flush), and at the end.
  template <typename Add>
  __device__ __forceinline__ void emit(Add&& add) {
    if constexpr (!kMerges) return;
    if (key != kNone) add(key, total);
    key = kNone;
  }

  // emit() by all 32 lanes of a warp together: where every lane's run is of one bin (one hot bin), the warp adds once.
  template <typename Add>
  __device__ __forceinline__ void emit_warp(Add&& add) {
    if constexpr (!kMerges) return;
    const Key lead = __shfl_sync(0xffffffffu, key, 0);
    if (__all_sync(0xffffffffu, key == lead) && lead != kNone) {
      const Acc sum = warp_combine<Policy>(total);
      if ((threadIdx.x & 31) == 0) add(lead, sum);
      key = kNone;
      return;
    }
    emit(add);
  }
};

// The calls for which tier units specialise kernel bodies (TierKernelVariants): integer input, counted or summed.
template <typename T, typename Policy>
constexpr bool kIntegerCounts = std::is_integral<T>::value && std::is_same<Policy, CountPolicy>::value;
template <typename T, typename Policy>
constexpr bool kIntegerSums = std::is_integral<T>::value && !std::is_same<Policy, CountPolicy>::value;
// Counts of input whose range binning runs in float (Binner::narrow_range_bin).
template <typename T, typename Policy>
constexpr bool kFloatRangeCounts = std::is_same<compute_t<T>, float>::value && std::is_same<Policy, CountPolicy>::value;

}  // namespace detail
}  // namespace dsmhist
