// The input dtypes, as one table: every other fact about a dtype (its enum, C++ element type, name, the precision
// it is binned in, whether it is floating, the torch dtype it comes from) is derived from a row of
// DSMHIST_FOR_EACH_INPUT_TYPE. Adding an input dtype is one row here and one kernel instantiation
// (csrc/kernels/histogram_<dtype>.cu).
#pragma once

#include <cstdint>
#include <type_traits>

namespace dsmhist {

// Half-precision inputs travel as their bits; binning.h converts them.
struct Float16 {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

// X(enumerator, C++ element type, name, compute type, torch ScalarType enumerator)
//
// The compute type is the precision binning arithmetic runs in: float for 8/16-bit ints and 16/32-bit floats
// (torch.histc on CUDA computes float inputs in float), double for float64 and for int32 / int64 (so large integers
// bin exactly). The torch column is only expanded by files that include torch (csrc/histogram_args.cpp).
#define DSMHIST_FOR_EACH_INPUT_TYPE(X)                \
  X(kUInt8, uint8_t, "uint8", float, Byte)            \
  X(kInt8, int8_t, "int8", float, Char)               \
  X(kInt16, int16_t, "int16", float, Short)           \
  X(kInt32, int32_t, "int32", double, Int)            \
  X(kInt64, int64_t, "int64", double, Long)           \
  X(kFloat16, Float16, "float16", float, Half)        \
  X(kBFloat16, BFloat16, "bfloat16", float, BFloat16) \
  X(kFloat32, float, "float32", float, Float)         \
  X(kFloat64, double, "float64", double, Double)

enum class InputType : int32_t {
#define DSMHIST_INPUT_ENUM(e, T, name, C, torch_type) e,
  DSMHIST_FOR_EACH_INPUT_TYPE(DSMHIST_INPUT_ENUM)
#undef DSMHIST_INPUT_ENUM
};

// Every input type, in the table's order.
constexpr InputType kInputTypes[] = {
#define DSMHIST_INPUT_LIST(e, T, name, C, torch_type) InputType::e,
    DSMHIST_FOR_EACH_INPUT_TYPE(DSMHIST_INPUT_LIST)
#undef DSMHIST_INPUT_LIST
};

// The row of an element type: InputTraits<T>::kType, ::kName and ::Compute.
template <typename T>
struct InputTraits;
#define DSMHIST_INPUT_TRAITS(e, T, name, C, torch_type) \
  template <>                                           \
  struct InputTraits<T> {                               \
    static constexpr InputType kType = InputType::e;    \
    static constexpr const char* kName = name;          \
    using Compute = C;                                  \
  };
DSMHIST_FOR_EACH_INPUT_TYPE(DSMHIST_INPUT_TRAITS)
#undef DSMHIST_INPUT_TRAITS

template <typename T>
using compute_t = typename InputTraits<T>::Compute;

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls visit(TypeTag<T>{}) with the C++ element type of `type`.
template <typename Visit>
decltype(auto) visit_input_type(InputType type, Visit&& visit) {
  switch (type) {
#define DSMHIST_INPUT_CASE(e, T, name, C, torch_type) \
  case InputType::e:                                  \
    return visit(TypeTag<T>{});
    DSMHIST_FOR_EACH_INPUT_TYPE(DSMHIST_INPUT_CASE)
#undef DSMHIST_INPUT_CASE
  }
  __builtin_unreachable();  // every InputType has a case above
}

// Derived facts, for host code that holds an InputType rather than a type.
inline const char* input_type_name(InputType type) {
  return visit_input_type(type, [](auto tag) { return InputTraits<typename decltype(tag)::type>::kName; });
}
inline bool is_floating(InputType type) {
  return visit_input_type(type, [](auto tag) { return !std::is_integral<typename decltype(tag)::type>::value; });
}
inline int64_t input_bytes(InputType type) {
  return visit_input_type(type, [](auto tag) { return int64_t(sizeof(typename decltype(tag)::type)); });
}
inline bool computes_in_double(InputType type) {
  return visit_input_type(
      type, [](auto tag) { return std::is_same<compute_t<typename decltype(tag)::type>, double>::value; });
}

}  // namespace dsmhist
