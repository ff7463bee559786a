// CUB's device-wide algorithms as a host program calls them: each call twice, first for
// the size of its temporary storage, then to run. make_device_ptx.sh compiles the device
// code to PTX (device_algorithms_sm80.ptx) and links the host code with
// record_runtime.cpp, a CUDA runtime that runs nothing and prints each launch, memset
// and copy CUB makes (device_algorithms_launches.jsonl). The device pointers are made
// up (0x7E55_0000_0000 + k * 2^32: k = 0 is the temporary storage, 1... the arrays in
// the order each call names them); CUB's host code never reads through them, so the
// launches are the ones a GPU would get. tests/frontend/ptx/test_cub_device.py replays
// them on the CPU with each array at its address and checks the results.
#include <cstdint>
#include <cstdlib>
#include <cub/device/device_histogram.cuh>
#include <cub/device/device_merge_sort.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_run_length_encode.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_segmented_reduce.cuh>
#include <cub/device/device_select.cuh>

template <class T>
T* device(int k) {
  return reinterpret_cast<T*>(0x7E5500000000ULL + (uint64_t(k) << 32));
}
extern "C" void note(const char* what, long a);
struct Positive {
  __device__ bool operator()(int x) const { return x > 0; }
};
struct Less {
  __device__ bool operator()(int a, int b) const { return a < b; }
};

// one algorithm: its name and size, the size query, the temporary storage's size, the run
#define RUN(name, n, call)        \
  {                               \
    size_t bytes = 0;             \
    void* temp = nullptr;         \
    note(name, n);                \
    call;                         \
    note("temp", bytes);          \
    temp = device<void>(0);       \
    call;                         \
  }

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 100000;
  RUN("reduce_sum", n, cub::DeviceReduce::Sum(temp, bytes, device<const float>(1), device<float>(2), n));
  RUN("reduce_argmax", n,
      cub::DeviceReduce::ArgMax(temp, bytes, device<const int>(1), device<int>(2), device<int64_t>(3), n));
  RUN("exclusive_sum", n, cub::DeviceScan::ExclusiveSum(temp, bytes, device<const int>(1), device<int>(2), n));
  RUN("inclusive_max", n,
      cub::DeviceScan::InclusiveScan(temp, bytes, device<const float>(1), device<float>(2), cuda::maximum<>{}, n));
  RUN("sort_pairs", n,
      cub::DeviceRadixSort::SortPairs(temp, bytes, device<const unsigned>(1), device<unsigned>(2),
                                      device<const int>(3), device<int>(4), n));
  RUN("sort_keys_descending", n,
      cub::DeviceRadixSort::SortKeysDescending(temp, bytes, device<const float>(1), device<float>(2), n));
  RUN("merge_sort", n, cub::DeviceMergeSort::SortKeys(temp, bytes, device<int>(1), n, Less{}));
  RUN("select_if", n,
      cub::DeviceSelect::If(temp, bytes, device<const int>(1), device<int>(2), device<int>(3), n, Positive{}));
  RUN("histogram_even", n,
      cub::DeviceHistogram::HistogramEven(temp, bytes, device<const float>(1), device<int>(2), 33, 0.0f, 1.0f, n));
  RUN("segmented_sum", 40,
      cub::DeviceSegmentedReduce::Sum(temp, bytes, device<const float>(1), device<float>(2), 40,
                                      device<const int>(3), device<const int>(3) + 1));
  RUN("run_length_encode", n,
      cub::DeviceRunLengthEncode::Encode(temp, bytes, device<const int>(1), device<int>(2), device<int>(3),
                                         device<int>(4), n));
  return 0;
}
