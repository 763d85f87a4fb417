// Answers kept per key behind one mutex: the device queries and the plans, asked on every call, are computed once.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

namespace dsmhist {

template <typename Key, typename Value>
class KeptAnswers {
 public:
  // Past `most` answers the store starts over: a caller cycling through many keys computes afresh, never unboundedly.
  explicit KeptAnswers(size_t most = SIZE_MAX) : most_(most) {}

  bool find(const Key& key, Value* value) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = answers_.find(key);
    if (it == answers_.end()) return false;
    *value = it->second;
    return true;
  }

  void keep(const Key& key, const Value& value) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (answers_.size() >= most_) answers_.clear();
    answers_.emplace(key, value);
  }

  // The kept answer for `key`, else compute(&value), kept when it succeeds. compute runs outside the lock (a device
  // query may take a while, and computing one answer twice is harmless).
  template <typename Compute>
  cudaError_t get(const Key& key, Value* value, Compute&& compute) {
    if (find(key, value)) return cudaSuccess;
    Value computed{};
    const cudaError_t err = compute(&computed);
    if (err != cudaSuccess) return err;
    keep(key, computed);
    *value = computed;
    return cudaSuccess;
  }

 private:
  const size_t most_;
  mutable std::mutex mutex_;
  std::map<Key, Value> answers_;
};

}  // namespace dsmhist
