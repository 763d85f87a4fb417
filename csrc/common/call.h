// What one call of any op is: HistogramParams, the description the CPU implementation and every CUDA kernel read.
// No torch and no CUDA header. The binning rules are in binning.h, the dtype table in dtypes.h.
#pragma once

#include <cstdint>

#include "dtypes.h"
#include "host_device.h"

namespace dsmhist {

enum class WeightType : int32_t { kNone, kFloat16, kBFloat16, kFloat32, kFloat64 };
enum class OutputType : int32_t { kInt32, kInt64, kFloat32, kFloat64 };

// What happens to a value outside the bins (the ops' out_of_range): kIgnore drops it, kClamp counts it in the first or
// last bin (NaN is always dropped). The rule is the Binner's and its keys' (binning.h), and edge_bin_of_upper_bound's
// (edge_binning.h).
enum class OutOfRange : int32_t { kIgnore, kClamp };

// kIndex: integer input, bin = value (torch.bincount). kRange: equal-width bins over [lo, hi] (torch.histc).
enum class BinMode : int32_t { kIndex, kRange };

// How a call given no range bins (the op's rule): integer input by value, floating input over its data's range.
inline BinMode mode_without_range(InputType type) { return is_floating(type) ? BinMode::kRange : BinMode::kIndex; }

// What a block accumulates in shared memory: 32-bit counts, float / double weight sums, or the two passes of the
// deterministic weighted sum: the largest weight exponent per bin (kExponent), then 64-bit fixed-point sums
// scaled by that exponent (kFixed). See DeterministicScratch.
enum class AccKind : int32_t { kCount, kFloat, kDouble, kExponent, kFixed };

// Inputs whose dims do not collapse to this many are copied to contiguous memory first (docs/semantics.md states it).
constexpr int kMaxDims = 8;

// The row dims of an input (its dims but the last, after size-1 dims are dropped and mergeable ones merged):
// where each row starts, in input and in weight.
struct StridedLayout {
  int32_t ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t input_strides[kMaxDims] = {};
  int64_t weight_strides[kMaxDims] = {};

  // Element offsets (in elements, not bytes) of the linear index `linear` in row-major order.
  DSMHIST_HD void offsets(int64_t linear, int64_t* input_offset, int64_t* weight_offset) const {
    int64_t in_off = 0, w_off = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t size = sizes[d];
      const int64_t idx = linear % size;
      linear /= size;
      in_off += idx * input_strides[d];
      w_off += idx * weight_strides[d];
    }
    *input_offset = in_off;
    *weight_offset = w_off;
  }
};

// Device scratch of a deterministic weighted sum, one entry per output bin (rows_out * bins): the first pass keeps
// the largest exponent of each bin's finite weights, the second adds every weight as an exact 64-bit integer in units
// of 2^(exponent + count_bits - 62), so the sum cannot overflow and integer addition makes the order irrelevant.
struct DeterministicScratch {
  unsigned int* exponents = nullptr;   // 0: no nonzero finite weight; else max(biased IEEE exponent, 1)
  unsigned int* specials = nullptr;    // bit flags of the non-finite weights seen: kSeenNaN | kSeenPosInf | ...
  unsigned long long* sums = nullptr;  // two's-complement fixed-point sums
  int32_t count_bits = 0;              // 2^count_bits >= the most elements one bin can receive
};
constexpr unsigned int kSeenNaN = 1u, kSeenPosInf = 2u, kSeenNegInf = 4u;

// What a call reads: `rows` runs of `row_length` elements each. Row r starts at layout.offsets(r) (in input and in
// weight) and its elements lie inner_*_stride apart. The traversal (CPU and CUDA) and the range pass read only this.
struct InputDescription {
  const void* input = nullptr;
  InputType input_type = InputType::kInt64;
  const void* weight = nullptr;  // null: every value counts 1
  WeightType weight_type = WeightType::kNone;

  int64_t rows = 1;
  int64_t row_length = 0;
  StridedLayout layout;  // the row dims; ndim 0 for a single row
  int64_t inner_input_stride = 1, inner_weight_stride = 1;
  // Set by the launcher, per kernel: each row is cut into this many interleaved segments, one work item each.
  int64_t segments_per_row = 1;

  DSMHIST_HD int64_t elements() const { return rows * row_length; }
  // Elements of a row are dense in input (and weight): the vectorised path applies.
  DSMHIST_HD bool unit_stride() const {
    return inner_input_stride == 1 && (weight == nullptr || inner_weight_stride == 1);
  }
};

// One call of any op that bins: what it reads (the InputDescription it extends), its bins and binning rule, and
// where it writes. histogram / histogram_add_ add every row into one histogram (output_row_stride 0);
// batched_histogram gives row r its own, at output + r * output_row_stride.
struct HistogramParams : InputDescription {
  void* output = nullptr;
  OutputType output_type = OutputType::kInt64;
  int64_t bins = 0;
  BinMode mode = BinMode::kIndex;
  OutOfRange out_of_range = OutOfRange::kIgnore;
  double lo = 0.0, hi = 0.0;  // the range for kRange, unless device_range is set
  // When set, the range is the data's finite min and max, written here on the device by the range pass (or merged
  // across ranks by torch_dsmhist.distributed), encoded as two order-preserving 64-bit keys; see encode_data_range.
  const unsigned long long* device_range = nullptr;
  // kRange whose range comes from the data: device_range is set only after the call is planned (the range pass runs
  // then), so the planner tells such a call by this.
  bool range_from_data = false;

  int64_t output_row_stride = 0;
  bool accumulate = false;  // add to the output's values (histogram_add_) instead of replacing them

  DeterministicScratch deterministic;
  // Device workspace of the planned tier (PreparedCall::workspace_bytes, kernels.h), from the caller; most need none.
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;

  // The histogram that row `row` adds into.
  DSMHIST_HD int64_t output_row(int64_t row) const { return output_row_stride == 0 ? 0 : row; }
  DSMHIST_HD int64_t output_rows() const { return output_row_stride == 0 ? 1 : rows; }
  // The elements that add into one histogram: all of them, or one row's when each row has its own.
  DSMHIST_HD int64_t elements_per_histogram() const { return output_row_stride == 0 ? elements() : row_length; }
};

// The range pass (floating input with no min/max): the input, and the two slots that receive the keys of its finite
// min and max (encode_data_range; slots of several inputs merge by the larger of each).
struct RangeParams {
  InputDescription input;
  unsigned long long* keys = nullptr;
};
inline RangeParams range_pass_params(const InputDescription& input, unsigned long long* keys) {
  RangeParams r;
  r.input = input;
  r.keys = keys;
  return r;
}

// The most elements one worker (a block or cluster) can count when `rows` rows of `row_length` are cut into
// `segments` items each and `workers` workers take the items in turn: the bound on its 32-bit shared counts.
DSMHIST_HD int64_t most_elements_per_worker(int64_t rows, int64_t row_length, int64_t segments, int64_t workers) {
  return (rows * segments + workers - 1) / workers * ((row_length + segments - 1) / segments);
}

DSMHIST_HD int64_t output_bytes(OutputType type) {
  return (type == OutputType::kInt32 || type == OutputType::kFloat32) ? 4 : 8;
}

// The deterministic sum's unit for a bin: weights are added as round(w * 2^shift). `exponent_code` bounds every
// |w| of the bin by 2^(exponent_code - 1022); with at most 2^count_bits terms the sum stays below 2^62.
DSMHIST_HD int32_t fixed_point_shift(unsigned int exponent_code, int32_t count_bits) {
  return 1084 - count_bits - static_cast<int32_t>(exponent_code);
}

}  // namespace dsmhist
