// The messages and allocations every op body shares: dtypes named as Python spells them, and allocations that say
// what could not be allocated, for which op and how large.
#include <c10/util/Exception.h>

#include <string>
#include <vector>

#include "histogram_args.h"

namespace dsmhist {

std::string torch_dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kByte:
      return "torch.uint8";
    case at::kChar:
      return "torch.int8";
    case at::kShort:
      return "torch.int16";
    case at::kInt:
      return "torch.int32";
    case at::kLong:
      return "torch.int64";
    case at::kHalf:
      return "torch.float16";
    case at::kBFloat16:
      return "torch.bfloat16";
    case at::kFloat:
      return "torch.float32";
    case at::kDouble:
      return "torch.float64";
    case at::kBool:
      return "torch.bool";
    case at::kComplexHalf:
      return "torch.complex32";
    case at::kComplexFloat:
      return "torch.complex64";
    case at::kComplexDouble:
      return "torch.complex128";
    case at::kUInt16:
      return "torch.uint16";
    case at::kUInt32:
      return "torch.uint32";
    case at::kUInt64:
      return "torch.uint64";
    default:
      return std::string("torch.") + c10::toString(dtype);
  }
}

at::Tensor allocate_named(const char* op, const std::string& what, c10::IntArrayRef shape,
                          const at::TensorOptions& options) {
  const int64_t element_bytes = static_cast<int64_t>(c10::elementSize(c10::typeMetaToScalarType(options.dtype())));
  int64_t bytes = element_bytes;
  for (const int64_t size : shape) {
    TORCH_CHECK_VALUE(!__builtin_mul_overflow(bytes, size, &bytes), op, ": ", what, " of shape ", shape,
                      " has a size in bytes that overflows int64");
  }
  const auto describe = [&] {
    return c10::str(op, ": ", what, " (shape ", shape, ", ",
                    torch_dtype_name(c10::typeMetaToScalarType(options.dtype())), ", ", bytes,
                    " bytes = ", static_cast<double>(bytes) / (1 << 30), " GiB) could not be allocated on ",
                    options.device());
  };
  try {
    return at::empty(shape, options);
  } catch (const c10::OutOfMemoryError& e) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, describe(), ": ", e.what_without_backtrace());
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, describe(), ": ", e.what_without_backtrace());
  }
}

}  // namespace dsmhist
