// The CPU engine's inner loop: `scan` adds the elements of a span whose bin lies in a bin range, and the bit-pattern
// tables that replace the Binner for 8- and 16-bit inputs (one load per element in either binning mode).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cpu_parallel.h"

namespace dsmhist {
namespace cpu {

// The bit pattern of an 8- or 16-bit input type, as the index of the tables below (`of`), and back (`value`).
template <typename T>
struct RawPattern {
  static constexpr bool kUsable = false;
  static constexpr int64_t kCount = 0;
};
template <typename T, typename Bits>
struct BitPattern {
  static_assert(sizeof(T) == sizeof(Bits) && std::is_unsigned<Bits>::value, "Bits: T's bits as an unsigned type");
  static constexpr bool kUsable = true;
  static constexpr int64_t kCount = int64_t(1) << (8 * sizeof(Bits));
  static uint32_t of(T v) {
    Bits bits;
    std::memcpy(&bits, &v, sizeof bits);
    return bits;
  }
  static T value(uint32_t r) {
    const Bits bits = static_cast<Bits>(r);
    T v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
  }
};
template <>
struct RawPattern<uint8_t> : BitPattern<uint8_t, uint8_t> {};
template <>
struct RawPattern<int8_t> : BitPattern<int8_t, uint8_t> {};
template <>
struct RawPattern<int16_t> : BitPattern<int16_t, uint16_t> {};
template <>
struct RawPattern<Float16> : BitPattern<Float16, uint16_t> {};
template <>
struct RawPattern<BFloat16> : BitPattern<BFloat16, uint16_t> {};

// The Binner's answer for every bit pattern of an 8/16-bit type, computed once per call: the per-element work of
// range binning becomes one load, so range and index binning of these types cost the same.
template <typename T>
struct TableBinner {
  std::vector<int64_t> bin_of;
  explicit TableBinner(const Binner<T>& binner) : bin_of(static_cast<size_t>(RawPattern<T>::kCount)) {
    for (int64_t r = 0; r < RawPattern<T>::kCount; ++r)
      bin_of[r] = binner(RawPattern<T>::value(static_cast<uint32_t>(r)));
  }
  int64_t operator()(T value) const { return bin_of[RawPattern<T>::of(value)]; }
};

// What a hot loop keeps in local variables: the Binner itself (a few scalars), or a pointer into the table.
template <typename T>
struct TableView {
  const int64_t* bin_of;
  int64_t operator()(T value) const { return bin_of[RawPattern<T>::of(value)]; }
};
template <typename T>
Binner<T> local_copy(const Binner<T>& binner) {
  return binner;
}
template <typename T>
TableView<T> local_copy(const TableBinner<T>& table) {
  return TableView<T>{table.bin_of.data()};
}

// Binner<T>::operator() of float32 input (range binning) for a block of values, bit for bit, with selects
// in place of its branches so the loop vectorises: every value computes its quotient, and an out-of-range or NaN
// value's is discarded (Binner::narrow_range_select, the device's narrow_range_bin's last step). Up to 2^24 bins,
// where float(bins) is exact, so the last bin's test becomes a min, and slots are 32-bit (64-bit slots cost more than
// the vector loop saves). A dropped value's slot is (uint32)(0xffffffff - first), above every bin range's width, as
// scan's compare expects of bin -1.
template <typename T>
struct BlockRangeBinner {
  // Whether it bins for `binner` (the Binner of float32 input, up to 2^24 bins).
  template <typename BinOf>
  static bool usable(const BinOf& binner) {
    if constexpr (kFloat32 && std::is_same<BinOf, Binner<T>>::value) return binner.bins <= (int64_t(1) << 24);
    return false;
  }
  // slot[j] = bin of xs[j * stride] - first, for j < count, where usable(binner) (the caller checks it once per run);
  // false (nothing written) for any other binner type.
  template <typename BinOf>
  static bool bins_of(const BinOf& binner, const T* xs, int64_t stride, int64_t count, int64_t first, uint32_t* slot) {
    if constexpr (kFloat32 && std::is_same<BinOf, Binner<T>>::value) {
      const T below_bins = binner.below_bins();
      const uint32_t start = static_cast<uint32_t>(first);
      const bool clamp = binner.clamp;
      for (int64_t j = 0; j < count; ++j) {
        const T x = xs[j * stride];
        const T quotient = binner.quotient(binner.dividend(x));  // the host divides
        // In [0, below bins] (a NaN becomes 0), so the conversion is defined and exact in 32 bits.
        const T bounded = quotient > T(0) ? (quotient < below_bins ? quotient : below_bins) : T(0);
        const uint32_t kept = static_cast<uint32_t>(static_cast<int32_t>(bounded));
        slot[j] = binner.narrow_range_select(x, kept, clamp) - start;
      }
      return true;
    }
    return false;
  }

 private:
  // float64 loses with it (2^24 values, 65536 bins: 29 -> 39 ms; two lanes a vector do not pay for the selects).
  static constexpr bool kFloat32 = std::is_same<T, float>::value;
};

// Adds elements [begin, end) whose bin lies in [b0, b1) into hist[bin - b0], in element order: 1 per element for
// counts (and for W == kNone), the weight for sums. kFloat32 / kFloat64 load their type directly; the 16-bit
// weight types share one instance (W == kFloat16) that converts through load_weight's switch. One unsigned compare
// tests both ends of the bin range (a dropped value's -1 wraps above it).
template <typename T, WeightType W, typename Acc, typename BinOf>
void scan(const HistogramParams& p, const BinOf& bin_of, int64_t begin, int64_t end, int64_t b0, int64_t b1,
          Acc* hist) {
  // Bins are computed a block at a time, then added: the binning loop has no stores that could alias its inputs
  // (so it can vectorise), and the adding loop is one load and one add per element.
  constexpr int64_t kBlock = 256;
  uint64_t slot[kBlock];
  uint32_t narrow_slot[kBlock];  // BlockRangeBinner's
  for_each_run<T>(
      p, begin, end,
      [&](const T* x, int64_t stride, int64_t weight_offset, int64_t weight_stride, int64_t count, int64_t) {
        const auto binner = local_copy(bin_of);  // local copies: stores into hist cannot alias them
        Acc* const h = hist;
        const int64_t first = b0;
        const uint64_t width = static_cast<uint64_t>(b1 - b0);
        const bool block_range = BlockRangeBinner<T>::usable(binner);
        if constexpr (W == WeightType::kNone) {
          if (stride == 1 && !block_range) {
            for (int64_t j = 0; j < count; ++j) {
              const uint64_t k = static_cast<uint64_t>(binner(x[j]) - first);
              if (k < width) h[k] += 1;
            }
            return;
          }
        }
        // Adds a block's elements from their slots (bin - first, 32 or 64 bits).
        const auto add_block = [&](const auto* slots, int64_t j0, int64_t m) {
          const int64_t w0 = weight_offset + j0 * weight_stride;
          for (int64_t j = 0; j < m; ++j) {
            const uint64_t k = slots[j];
            if (k >= width) continue;  // dropped (-1 wraps above every width) or another thread's bins
            if constexpr (W == WeightType::kNone) {
              h[k] += 1;
            } else if constexpr (W == WeightType::kFloat32) {
              h[k] += static_cast<const float*>(p.weight)[w0 + j * weight_stride];
            } else if constexpr (W == WeightType::kFloat64) {
              h[k] += static_cast<const double*>(p.weight)[w0 + j * weight_stride];
            } else {
              h[k] += load_weight<double>(p.weight, p.weight_type, w0 + j * weight_stride);
            }
          }
        };
        for (int64_t j0 = 0; j0 < count; j0 += kBlock) {
          const int64_t m = std::min(kBlock, count - j0);
          const T* xs = x + j0 * stride;
          if (block_range && BlockRangeBinner<T>::bins_of(binner, xs, stride, m, first, narrow_slot)) {
            add_block(narrow_slot, j0, m);
            continue;
          }
          if (stride == 1) {
            for (int64_t j = 0; j < m; ++j) slot[j] = static_cast<uint64_t>(binner(xs[j]) - first);
          } else {
            for (int64_t j = 0; j < m; ++j) slot[j] = static_cast<uint64_t>(binner(xs[j * stride]) - first);
          }
          add_block(slot, j0, m);
        }
      });
}

}  // namespace cpu
}  // namespace dsmhist
