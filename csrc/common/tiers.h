// The strategy tiers on CUDA, as one table. A row of DSMHIST_FOR_EACH_TIER is the whole of a tier's registration:
// its user-facing name (what force_tier and plan() say), the unit that implements it (a namespace in
// csrc/kernels/tier_<unit>.cuh holding the kernel and its fit / shape functions), whether the planner may pick it,
// and whether its kernel always runs as a thread block cluster. Parsing and naming tiers, Python's list of tiers
// (dsmhist._tiers) and the CUDA dispatch all expand this table. No torch and no CUDA header: the CPU build parses
// tier names too.
//
// The planner tries the tiers it may pick in the table's order and takes the first that fits, so the order is the
// order of preference.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dsmhist {

// X(enumerator, name, unit, planner may pick, cluster kernel)
//   shared         all bins in every block's shared memory (block-private copies, flushed once per block); small
//                  1-D calls run as one cluster that sums the blocks' copies through DSMEM instead.
//   exchange       counts only: the bins owned interleaved by the blocks of a cluster; each value is read once and
//                  passed to its owner through DSMEM (each round: rank by owner, stage, count the group from every
//                  block's staging). The planner takes it for integer input binned by value between
//                  past tier cluster's automatic bins, up to what a 16-block cluster holds (tuning.h).
//   partition      many bins: the input, in slices, grouped by chunk of bins (kernel 1), then each chunk counted in
//                  one block's shared memory (kernels 2-3); a workspace of at most 256 MiB. No cluster needed. The
//                  planner takes it past tier cluster's automatic bins (tuning.h, with the measurements).
//   cluster        the bins split across the blocks of a cluster; every block reads the whole input and counts only
//                  its own bin range, with local shared-memory atomics (no DSMEM traffic).
//   global         atomics straight into the output (run merging; a per-block cache of hot bins for counts).
//   cluster_dsmem  the CUDA guide's design: the bins split across a cluster, every thread adding into the owning
//                  block's bins through DSMEM; slower than "cluster", so only ever forced.
#define DSMHIST_FOR_EACH_TIER(X)                               \
  X(kShared, "shared", block_private_tier, true, false)        \
  X(kExchange, "exchange", exchange_tier, true, true)          \
  X(kPartition, "partition", partition_tier, true, false)      \
  X(kCluster, "cluster", owned_range_cluster_tier, true, true) \
  X(kGlobal, "global", global_atomic_tier, true, false)        \
  X(kClusterDsmem, "cluster_dsmem", dsmem_cluster_tier, false, true)

// kAuto lets the planner choose; the others are the table's rows, numbered from 1 in its order.
enum class Tier : int32_t {
  kAuto = 0,
#define DSMHIST_TIER_ENUM(e, name, unit, pick, cluster) e,
  DSMHIST_FOR_EACH_TIER(DSMHIST_TIER_ENUM)
#undef DSMHIST_TIER_ENUM
};

struct TierInfo {
  Tier tier;
  const char* name;
  bool planner_may_pick;
  bool cluster_kernel;  // launched as a cluster, needs sm_90 code; the cluster size may be forced
};

constexpr TierInfo kTiers[] = {
#define DSMHIST_TIER_INFO(e, name, unit, pick, cluster) TierInfo{Tier::e, name, pick, cluster},
    DSMHIST_FOR_EACH_TIER(DSMHIST_TIER_INFO)
#undef DSMHIST_TIER_INFO
};
constexpr int kTierCount = static_cast<int>(sizeof(kTiers) / sizeof(kTiers[0]));
constexpr const char* kAutoTierName = "auto";

// The row of a tier other than kAuto (its position in kTiers).
constexpr int tier_index(Tier tier) { return static_cast<int>(tier) - 1; }
constexpr const TierInfo& tier_info(Tier tier) { return kTiers[tier_index(tier)]; }

inline const char* tier_name(Tier tier) { return tier == Tier::kAuto ? kAutoTierName : tier_info(tier).name; }

// The tier called `name` ("auto" included); false when there is none.
inline bool parse_tier_name(std::string_view name, Tier* tier) {
  if (name == kAutoTierName) {
    *tier = Tier::kAuto;
    return true;
  }
  for (const TierInfo& info : kTiers) {
    if (name == info.name) {
      *tier = info.tier;
      return true;
    }
  }
  return false;
}

// The names a message lists: "\"auto\", \"shared\", ..." (every tier) or, with `cluster_only`, the cluster tiers
// joined by " and ".
inline std::string quoted_tier_names(bool cluster_only = false) {
  std::string out = cluster_only ? "" : std::string("\"") + kAutoTierName + "\"";
  int listed = 0, total = 0;
  for (const TierInfo& info : kTiers) total += !cluster_only || info.cluster_kernel;
  for (const TierInfo& info : kTiers) {
    if (cluster_only && !info.cluster_kernel) continue;
    ++listed;
    if (!out.empty()) out += cluster_only && listed == total ? " and " : ", ";
    out += std::string("\"") + info.name + "\"";
  }
  return out;
}

}  // namespace dsmhist
