// Thrust's device_vector, sort and reduce, and CUB's device-wide max with temporary
// storage from cudaMalloc: the library host code decides the launches.
#include <cstdio>
#include <cub/device/device_reduce.cuh>
#include <thrust/device_vector.h>
#include <thrust/host_vector.h>
#include <thrust/reduce.h>
#include <thrust/sort.h>

int main() {
  const int n = 20000;
  thrust::host_vector<int> h(n);
  for (int i = 0; i < n; ++i) h[i] = (i * 7919) % 10007 - 5000;
  thrust::device_vector<int> d = h;
  thrust::sort(d.begin(), d.end());
  long long sum = thrust::reduce(d.begin(), d.end(), 0LL);
  thrust::host_vector<int> sorted = d;
  int* out;
  cudaMalloc(&out, sizeof(int));
  void* temp = nullptr;
  size_t bytes = 0;
  cub::DeviceReduce::Max(temp, bytes, thrust::raw_pointer_cast(d.data()), out, n);
  cudaMalloc(&temp, bytes);
  cub::DeviceReduce::Max(temp, bytes, thrust::raw_pointer_cast(d.data()), out, n);
  int best = 0;
  cudaMemcpy(&best, out, sizeof best, cudaMemcpyDeviceToHost);
  for (int i = 0; i < n; ++i) printf("%d\n", static_cast<int>(sorted[i]));
  printf("sum %lld max %d\n", sum, best);
  return 0;
}
