// The binning rules shared by the CPU implementation and every CUDA tier: value conversions, the data-derived range
// and its keys, and the Binner that maps a value to its bin. Every rule that decides which bin a value lands in lives
// here, once, so the CPU and CUDA paths (and every CUDA tier) agree bit for bit. No torch and no CUDA header.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "call.h"
#include "dtypes.h"
#include "host_device.h"

namespace dsmhist {

// ---------------------------------------------------------------------------------------------------------------
// Conversions
// ---------------------------------------------------------------------------------------------------------------

// The bits of `from` read as a To of the same size (C++20's std::bit_cast, for C++17 host and device code alike: the
// copy compiles to a register move).
template <typename To, typename From>
DSMHIST_HD To bits_as(const From& from) {
  static_assert(sizeof(To) == sizeof(From), "a bit cast keeps the size");
  To to;
  memcpy(&to, &from, sizeof(To));
  return to;
}

DSMHIST_HD float float_from_bits(uint32_t u) { return bits_as<float>(u); }
DSMHIST_HD double double_from_bits(uint64_t u) { return bits_as<double>(u); }
DSMHIST_HD uint64_t bits_from_double(double d) { return bits_as<uint64_t>(d); }

// max(biased exponent, 1) of a finite double: |d| < 2^(code - 1022). Subnormals share code 1 (|d| < 2^-1021).
DSMHIST_HD unsigned int exponent_code(double d) {
  const unsigned int biased = static_cast<unsigned int>((bits_from_double(d) >> 52) & 0x7ffu);
  return biased == 0 ? 1u : biased;
}

// IEEE half -> float is exact, so the hardware conversion and this bit-level one give identical floats.
DSMHIST_HD float half_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#else
  const uint32_t sign = static_cast<uint32_t>(h >> 15) << 31;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1f) return float_from_bits(sign | 0x7f800000u | (mantissa << 13));  // inf / NaN
  return float_from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
#endif
}

template <typename T>
DSMHIST_HD compute_t<T> to_compute(T v) {
  return static_cast<compute_t<T>>(v);
}
template <>
DSMHIST_HD float to_compute<Float16>(Float16 v) {
  return half_to_float(v.bits);
}
template <>
DSMHIST_HD float to_compute<BFloat16>(BFloat16 v) {
  return float_from_bits(static_cast<uint32_t>(v.bits) << 16);
}

// Finite test that compilers keep under any float flags: inf - inf and NaN - NaN are NaN, and NaN != 0.
template <typename C>
DSMHIST_HD bool is_finite_value(C x) {
  return (x - x) == C(0);
}

// The weight of the element at `offset` (in elements), in the accumulator's precision.
template <typename Acc>
DSMHIST_HD Acc load_weight(const void* weight, WeightType type, int64_t offset) {
  switch (type) {
    case WeightType::kFloat16:
      return static_cast<Acc>(half_to_float(static_cast<const uint16_t*>(weight)[offset]));
    case WeightType::kBFloat16:
      return static_cast<Acc>(
          float_from_bits(static_cast<uint32_t>(static_cast<const uint16_t*>(weight)[offset]) << 16));
    case WeightType::kFloat32:
      return static_cast<Acc>(static_cast<const float*>(weight)[offset]);
    case WeightType::kFloat64:
      return static_cast<Acc>(static_cast<const double*>(weight)[offset]);
    default:
      return Acc(1);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The data-derived range (floating input with no min/max)
// ---------------------------------------------------------------------------------------------------------------

// Order-preserving key of a non-NaN double: a < b  <=>  key(a) < key(b) as unsigned integers. The range pass keeps
// max(~key(min)) and max(key(max)), so one zero-fill initialises both slots and 0 means "no finite value seen".
DSMHIST_HD uint64_t encode_range_key(double d) {
  const uint64_t bits = bits_from_double(d);
  return (bits >> 63) ? ~bits : (bits | (uint64_t(1) << 63));
}
DSMHIST_HD double decode_range_key(uint64_t key) {
  return double_from_bits((key >> 63) ? (key & ~(uint64_t(1) << 63)) : ~key);
}

// torch.histc's rules for a range taken from the data: an empty (or all non-finite) input gives [-1, 1], and a
// single repeated value v gives [v - 1, v + 1].
DSMHIST_HD void finalize_data_range(bool any_finite, double data_min, double data_max, double* lo, double* hi) {
  if (!any_finite) {
    data_min = 0.0;
    data_max = 0.0;
  }
  if (data_min == data_max) {
    data_min -= 1.0;
    data_max += 1.0;
  }
  *lo = data_min;
  *hi = data_max;
}

// The two slots of a finite min and max: ~key(min) and key(max), both 0 when there is no finite value. Slots of
// several inputs merge by the larger of each (as unsigned integers), which is how the range pass's blocks and
// torch_dsmhist.distributed's ranks combine their ranges.
DSMHIST_HD void encode_data_range(bool any_finite, double data_min, double data_max, uint64_t* keys) {
  keys[0] = any_finite ? ~encode_range_key(data_min) : 0;
  keys[1] = any_finite ? encode_range_key(data_max) : 0;
}

// The range that encode_data_range's slots stand for, with torch.histc's rules applied (finalize_data_range).
DSMHIST_HD void decode_data_range(const unsigned long long* keys, double* lo, double* hi) {
  const uint64_t min_key = ~static_cast<uint64_t>(keys[0]);
  const uint64_t max_key = static_cast<uint64_t>(keys[1]);
  const bool any_finite = keys[1] != 0;
  finalize_data_range(any_finite, any_finite ? decode_range_key(min_key) : 0.0,
                      any_finite ? decode_range_key(max_key) : 0.0, lo, hi);
}

// ---------------------------------------------------------------------------------------------------------------
// Binning
// ---------------------------------------------------------------------------------------------------------------

// Whether integer `value` is a bin index, 0 <= value < bins, in one unsigned compare (a negative value wraps above
// every bin count). `narrow_bins` = min(bins, 2^31): the bound for an input of at most 32 bits.
template <typename T>
DSMHIST_HD bool is_bin_index(T value, uint32_t narrow_bins, int64_t bins) {
  static_assert(std::is_integral<T>::value, "by value: integer input");
  if constexpr (sizeof(T) <= 4) {
    return static_cast<uint32_t>(static_cast<int32_t>(value)) < narrow_bins;
  } else {
    return static_cast<uint64_t>(static_cast<int64_t>(value)) < static_cast<uint64_t>(bins);
  }
}

// Maps a value to its bin, or -1 when it is dropped. One instance per thread, built from the params.
//
// Range mode computes torch.histc's (x - lo) * bins / (hi - lo) in compute_t<T>. Where (hi - lo) * bins overflows
// that precision (a data-derived range like [-3e38, 3e38] in float32, or a huge range with many bins), torch's
// arithmetic would give inf / inf; there every operand is first scaled by 2^-64, which is exact (bar subnormals,
// far below one bin's width), so the bins stay right. Where nothing overflows the scale is 1, and x * 1 - lo is
// bit-identical to x - lo (also when fused into an FMA), so results equal torch.histc's.
//
// On the device the division is a multiply by the span's reciprocal and one correction (Binner::quotient), which
// gives the IEEE quotient bit for bit, so CPU and device still agree; a true division per value took 11-28% of a
// range-binned call's time (benchmarks/NOTES.md, "Range binning without a division").
template <typename T>
struct Binner {
  using C = compute_t<T>;
  BinMode mode;
  // p.out_of_range == kClamp (kIgnore drops). A bool rather than the enum: with the enum in its place, ptxas re-read
  // threadIdx.x in tier partition's kernel 1 for every element's rank, and skewed counts took 2-3% longer
  // (docs/perf-log/2026-11-partition.md, 2026-11-28).
  bool clamp;
  int64_t bins;
  // min(bins, 2^31): an input of at most 32 bits is a bin index exactly when, cast to uint32, it is below this.
  uint32_t narrow_bins;
  C lo, hi, fbins, scale, scaled_lo, scaled_span;
  // RN(1 / scaled_span) where the device's correction is exact for every dividend (reciprocal_for_division), else 0.
  C reciprocal;

  DSMHIST_HD explicit Binner(const HistogramParams& p)
      : mode(p.mode),
        clamp(p.out_of_range == OutOfRange::kClamp),
        bins(p.bins),
        narrow_bins(static_cast<uint32_t>(p.bins < (int64_t(1) << 31) ? p.bins : (int64_t(1) << 31))) {
    double range_lo = p.lo, range_hi = p.hi;
    if (p.device_range != nullptr) decode_data_range(p.device_range, &range_lo, &range_hi);
    lo = static_cast<C>(range_lo);
    hi = static_cast<C>(range_hi);
    fbins = static_cast<C>(bins);
    if (hi == lo) {
      // min < max that round to one value in C (a constant data range [v - 1, v + 1] with |v| >= 2^25 in float32,
      // say): every value inside equals that value, and it lands in the middle bin, bins / 2 (this op's rule, as
      // docs/semantics.md states it; torch.histc never bins in a collapsed range: its CPU histc widens a constant to
      // the neighbouring floats, its CUDA histc raises). scaled = (x * 0 + 0.5) * bins / 1, with no branch per element.
      scale = C(0);
      scaled_lo = C(-0.5);
      scaled_span = C(1);
      reciprocal = C(1);
      return;
    }
    scale = is_finite_value((hi - lo) * fbins) ? C(1) : static_cast<C>(5.421010862427522e-20);  // 2^-64
    scaled_lo = lo * scale;
    scaled_span = hi * scale - scaled_lo;
    reciprocal = reciprocal_for_division(scaled_span);
  }

  // Markstein's theorem (radix 2, round to nearest): for y = RN(1 / b) and q0 = RN(a * y), which is within an ulp of
  // a / b, the remainder r = a - q0 * b is exact and RN(q0 + r * y) = RN(a / b), unless a step underflows or
  // overflows. For a span b in [2^-100, 2^100] none does where it matters: y is normal, and a dividend small enough
  // to underflow the remainder gives a quotient far below 1 (bin 0) either way. Checked against the division on the
  // H100 for 1.4e12 float32 pairs (every significand) and 3.5e10 random float64 pairs (benchmarks/NOTES.md).
  // Outside that span: 0, and the device divides.
  DSMHIST_HD static C reciprocal_for_division(C span) {
    const bool safe = span >= static_cast<C>(7.888609052210118e-31) && span <= static_cast<C>(1.2676506002282294e30);
    return safe ? C(1) / span : C(0);  // 2^-100, 2^100; C(1) / span is the IEEE quotient on the host and device
  }

#if defined(__CUDA_ARCH__)
  // RN(t / scaled_span) by the reciprocal and one correction (Markstein); only where reciprocal != 0.
  __device__ __forceinline__ C quotient_by_reciprocal(C t) const {
    if constexpr (std::is_same<C, float>::value) {
      const float q0 = __fmul_rn(t, reciprocal);
      return __fmaf_rn(__fmaf_rn(-q0, scaled_span, t), reciprocal, q0);
    } else {
      const double q0 = __dmul_rn(t, reciprocal);
      return __fma_rn(__fma_rn(-q0, scaled_span, t), reciprocal, q0);
    }
  }
#endif

  // torch.histc's t / span, rounded once. The CPU divides; the device multiplies and corrects where it may.
  DSMHIST_HD C quotient(C t) const {
#if defined(__CUDA_ARCH__)
    if (reciprocal != C(0)) return quotient_by_reciprocal(t);
#endif
    return t / scaled_span;
  }

  // torch.histc's (x - lo) * bins, the dividend of the quotient that operator() truncates to x's bin.
  DSMHIST_HD C dividend(C x) const { return (x * scale - scaled_lo) * fbins; }

  // Whether narrow_range_bin gives operator()'s bin for every value of this call on the device: a range computed in
  // float whose quotient the device takes by the reciprocal (no division), over at most 2^24 bins, so that a kept
  // quotient (in [0, bins)) truncates to the same bin in 32 bits, and the float below RN(bins) = bins truncates to
  // bins - 1.
  DSMHIST_HD bool narrow_range_applies() const {
    return std::is_same<C, float>::value && mode == BinMode::kRange && reciprocal != C(0) && bins <= (int64_t(1) << 24);
  }

#if defined(__CUDA_ARCH__)
  // operator()'s bin in 32 bits with no branch, where narrow_range_applies(): the quotient is taken for every value,
  // its bin (the float below bins bounds it: the last-bin rule) and the out-of-range rule's are selected. A dropped
  // value gets 0xffffffff (at least bins). kOutOfRange must be the call's. The general path took about 23
  // instructions a value, about 9 of them branches and their reconvergence (docs/perf-log/2026-11-cluster.md).
  template <OutOfRange kOutOfRange>
  __device__ __forceinline__ uint32_t narrow_range_bin(T value) const {
    static_assert(std::is_same<C, float>::value, "narrow range bins are computed in float");
    const float x = to_compute(value);
    // NaN, infinities and values outside give any number here (the conversion saturates): the selects drop them.
    const uint32_t kept = __float2uint_rz(fminf(quotient_by_reciprocal(dividend(x)), below_bins()));
    static_assert(kOutOfRange == OutOfRange::kIgnore || kOutOfRange == OutOfRange::kClamp, "a rule for each mode");
    return narrow_range_select(x, kept, kOutOfRange == OutOfRange::kClamp);
  }
#endif

  // The float below RN(bins) (fbins >= 1), a quotient's bound in a branch-free range bin: up to 2^24 bins it truncates
  // to bins - 1, operator()'s bin for a quotient at or past bins.
  DSMHIST_HD float below_bins() const {
    static_assert(std::is_same<C, float>::value, "narrow range bins are computed in float");
    return float_from_bits(bits_as<uint32_t>(fbins) - 1u);
  }

  // The last step of a branch-free range bin (narrow_range_bin on the device, the CPU's vector blocks): x's bin, given
  // `kept`, its quotient's truncation (bounded by the float below bins; any number where x is outside or NaN), by the
  // out-of-range rule (`clamp`), or 0xffffffff (at least bins) where x is dropped. operator()'s rule with selects.
  DSMHIST_HD uint32_t narrow_range_select(C x, uint32_t kept, bool clamp) const {
    const bool inside = (x >= lo) & (x <= hi);  // false for NaN; & rather than &&: no branch on the first test
    const uint32_t clamped = x < lo ? 0u : (x > hi ? static_cast<uint32_t>(bins - 1) : 0xffffffffu);
    return inside ? kept : (clamp ? clamped : 0xffffffffu);
  }

  DSMHIST_HD int64_t operator()(T value) const {
    if constexpr (std::is_integral<T>::value) {
      if (mode == BinMode::kIndex) {
        const int64_t v = static_cast<int64_t>(value);
        if (is_bin_index(value, narrow_bins, bins)) return v;
        if (!clamp) return -1;
        return v < 0 ? 0 : bins - 1;
      }
    }
    const C x = to_compute(value);
    if (x >= lo && x <= hi) {
      // x == hi (or rounding just below it) lands in the last bin, as in torch.histc and numpy.
      const C scaled = quotient(dividend(x));
      return scaled < fbins ? static_cast<int64_t>(scaled) : bins - 1;
    }
    if (!clamp || x != x) return -1;  // NaN is always dropped
    return x < lo ? 0 : bins - 1;
  }
};

// Binner::narrow_range_applies for the call `p` describes, asked on the host when it is planned. Where the range
// comes from the data (found on the device, p.device_range, after planning) the host cannot tell: false. (A plan
// that took the data's range for the narrow keys put every value in bin 0 where its quotient needs a division.)
inline bool narrow_range_on_host(const HistogramParams& p) {
  if (p.mode != BinMode::kRange || p.range_from_data || p.device_range != nullptr) return false;
  return visit_input_type(p.input_type,
                          [&](auto tag) { return Binner<typename decltype(tag)::type>(p).narrow_range_applies(); });
}

// The Binner's by-value rule in the narrow width of T, for the fast paths that key integer input by value without its
// 64-bit bin (tiers cluster, exchange and partition; bins < 2^31): `value`'s bin as an unsigned number, at least bins
// exactly where the value is dropped (kIgnore: a negative value wraps to a large one), or with kClamp first clamped
// to [0, last_bin]. A new out_of_range mode is a case here and in the Binner (its clamp flag, operator()).
template <typename T>
using narrow_signed_t = std::conditional_t<(sizeof(T) > 4), int64_t, int32_t>;

template <OutOfRange kOutOfRange, typename T>
DSMHIST_HD std::make_unsigned_t<narrow_signed_t<T>> value_bin(T value, narrow_signed_t<T> last_bin) {
  static_assert(std::is_integral<T>::value, "by value: integer input");
  static_assert(std::is_signed<T>::value || sizeof(T) < sizeof(narrow_signed_t<T>), "every value keeps its sign");
  static_assert(kOutOfRange == OutOfRange::kIgnore || kOutOfRange == OutOfRange::kClamp, "a rule for each mode");
  using S = narrow_signed_t<T>;
  S v = static_cast<S>(value);
  if constexpr (kOutOfRange == OutOfRange::kClamp) v = v < S(0) ? S(0) : (v > last_bin ? last_bin : v);
  return static_cast<std::make_unsigned_t<S>>(v);
}

}  // namespace dsmhist
