// CUB's DeviceHistogram::HistogramEven as a contender for benchmarks/bench_suite.py, behind a plain C ABI that the
// benchmark loads with ctypes (no torch header: it builds alone with nvcc, like the kernels).
//
//   nvcc -O3 -shared -Xcompiler -fPIC -gencode=arch=compute_90,code=sm_90 -o cub_harness.so cub_harness.cu
//
// Each entry point follows CUB's two-call protocol: with temp == nullptr it only writes the scratch size it needs to
// *temp_bytes; then it runs with that scratch. Returns the cudaError_t as an int. Counters are 32-bit (CUB's int).
#include <cub/device/device_histogram.cuh>

#include <cstddef>
#include <cstdint>

namespace {

template <typename Sample, typename Level>
int histogram_even(void* temp, size_t* temp_bytes, const void* samples, int* histogram, int bins, Level lower,
                   Level upper, long long count, void* stream) {
  size_t bytes = *temp_bytes;
  const cudaError_t status =
      cub::DeviceHistogram::HistogramEven(temp, bytes, static_cast<const Sample*>(samples), histogram, bins + 1, lower,
                                          upper, static_cast<int64_t>(count), static_cast<cudaStream_t>(stream));
  *temp_bytes = bytes;
  return static_cast<int>(status);
}

}  // namespace

extern "C" {

int cub_histogram_even_uint8(void* temp, size_t* temp_bytes, const void* samples, int* histogram, int bins, int lower,
                             int upper, long long count, void* stream) {
  return histogram_even<uint8_t, int>(temp, temp_bytes, samples, histogram, bins, lower, upper, count, stream);
}

int cub_histogram_even_int32(void* temp, size_t* temp_bytes, const void* samples, int* histogram, int bins, int lower,
                             int upper, long long count, void* stream) {
  return histogram_even<int32_t, int>(temp, temp_bytes, samples, histogram, bins, lower, upper, count, stream);
}

int cub_histogram_even_int64(void* temp, size_t* temp_bytes, const void* samples, int* histogram, int bins,
                             long long lower, long long upper, long long count, void* stream) {
  return histogram_even<long long, long long>(temp, temp_bytes, samples, histogram, bins, lower, upper, count, stream);
}

int cub_histogram_even_float32(void* temp, size_t* temp_bytes, const void* samples, int* histogram, int bins,
                               float lower, float upper, long long count, void* stream) {
  return histogram_even<float, float>(temp, temp_bytes, samples, histogram, bins, lower, upper, count, stream);
}

}  // extern "C"
