// The C++ signatures of the ops that C++ calls through the dispatcher (the autograd kernels in autograd.cpp, the
// eager entry points in eager_entry.cpp), and the lookup of their typed handles. A signature must match the op's
// schema in registration.cpp and its kernels' C++ types: typed<>() checks it at the lookup.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <tuple>

namespace dsmhist {

using Tensors3 = std::tuple<at::Tensor, at::Tensor, at::Tensor>;  // the MoE ops' three outputs

using HistogramSignature = at::Tensor(const at::Tensor&, int64_t, std::optional<double>, std::optional<double>,
                                      const std::optional<at::Tensor>&, c10::string_view,
                                      std::optional<at::ScalarType>);
using HistogramAddSignature = void(at::Tensor&, const at::Tensor&, std::optional<double>, std::optional<double>,
                                   const std::optional<at::Tensor>&, c10::string_view);
using HistogramOutSignature = void(at::Tensor&, const at::Tensor&, std::optional<double>, std::optional<double>,
                                   const std::optional<at::Tensor>&, c10::string_view, std::optional<at::ScalarType>,
                                   bool);
using RangeKeysSignature = at::Tensor(const at::Tensor&, int64_t, const at::Tensor&, const std::optional<at::Tensor>&,
                                      c10::string_view, std::optional<at::ScalarType>, bool);
using BinIndicesSignature = at::Tensor(const at::Tensor&, int64_t, std::optional<double>, std::optional<double>,
                                       c10::string_view, const std::optional<at::Tensor>&);
using HistogramEdgesSignature = at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                           c10::string_view, std::optional<at::ScalarType>);
using EdgeBinIndicesSignature = at::Tensor(const at::Tensor&, at::TensorList, c10::string_view);
using RowEdgeBinIndicesSignature = at::Tensor(const at::Tensor&, const at::Tensor&, c10::string_view);
using EdgesSignature = at::Tensor(const at::Tensor&, at::TensorList, const std::optional<at::Tensor>&, c10::string_view,
                                  std::optional<at::ScalarType>);
using MoeAlignSignature = Tensors3(const at::Tensor&, int64_t, int64_t, const std::optional<at::Tensor>&, bool);
using MoeRoutingSignature = Tensors3(const at::Tensor&, int64_t, int64_t);

// The typed handle of op `name` ("dsmhist::histogram"), its default overload. A caller keeps it in a static of its
// own (one static here would be shared by every op of the same signature).
template <typename Signature>
c10::TypedOperatorHandle<Signature> find_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").template typed<Signature>();
}

}  // namespace dsmhist
