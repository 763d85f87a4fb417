// DSMHIST_LOG_LAUNCHES=1: one line on stderr per histogram a backend runs, saying what ran (the CUDA backend: tier,
// variant, grid, cluster, shared memory; the CPU: threads), beside plan()'s "what would run". Read once per process;
// off, it costs one branch per call.
#pragma once

#include <cstdlib>
#include <cstring>

namespace dsmhist {

inline bool log_launches() {
  static const bool enabled = [] {
    const char* value = std::getenv("DSMHIST_LOG_LAUNCHES");
    return value != nullptr && value[0] != '\0' && std::strcmp(value, "0") != 0;
  }();
  return enabled;
}

}  // namespace dsmhist
