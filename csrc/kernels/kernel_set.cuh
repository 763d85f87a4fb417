// The kernels of one input type: every tier's kernel (a row of the tier table each), the range pass and the bin
// indices, per accumulation policy. Only the per-dtype translation units (histogram_<dtype>.cu) include this file, so
// each kernel is compiled once, in its dtype's unit; the host code sees kernel_set_for's declaration (kernels.h).
#pragma once

#include <type_traits>

#include "policies.cuh"
#include "range_kernels.cuh"
#include "tier_units.cuh"

namespace dsmhist {

// The kernels of one input type and accumulation policy: each tier's kernel, then its unit's variants.
template <typename T, typename Policy>
KernelSet make_kernel_set() {
  KernelSet set;
#define DSMHIST_TIER_KERNEL(e, name, unit, pick, cluster)                                      \
  set.tiers[tier_index(Tier::e)][0] = reinterpret_cast<const void*>(&unit::kernel<T, Policy>); \
  TierKernelVariants<Tier::e, T, Policy>::add(set.tiers[tier_index(Tier::e)], [](auto body) {  \
    return reinterpret_cast<const void*>(&unit::kernel<T, Policy, decltype(body)::value>);     \
  });
  DSMHIST_FOR_EACH_TIER(DSMHIST_TIER_KERNEL)
#undef DSMHIST_TIER_KERNEL
  set.bin_index = reinterpret_cast<const void*>(&bin_index_kernel<T>);
  if constexpr (std::is_integral<T>::value) {
    set.finite_range = nullptr;  // integer input without a range bins by value: no range pass
  } else {
    set.finite_range = reinterpret_cast<const void*>(&finite_range_kernel<T>);
  }
  return set;
}

template <typename T>
KernelSet kernel_set_for(AccKind acc) {
  switch (acc) {
    case AccKind::kFloat:
      return make_kernel_set<T, detail::WeightPolicy<float>>();
    case AccKind::kDouble:
      return make_kernel_set<T, detail::WeightPolicy<double>>();
    case AccKind::kExponent:
      return make_kernel_set<T, detail::ExponentPolicy>();
    case AccKind::kFixed:
      return make_kernel_set<T, detail::FixedPointPolicy>();
    default:
      return make_kernel_set<T, detail::CountPolicy>();
  }
}

}  // namespace dsmhist
