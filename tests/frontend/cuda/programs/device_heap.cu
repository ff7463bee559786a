// The device heap: blocks a kernel takes with malloc, a later kernel reads and frees;
// the heap made larger with cudaDeviceSetLimit first (the blocks need 12 MiB, more than
// the default 8 MiB), and a request it cannot hold returning NULL.
#include <cstdio>

__global__ void take(int** blocks, size_t n) {
  int* block = static_cast<int*>(malloc(n * sizeof(int)));
  for (size_t i = 0; block && i < n; i += 4096)
    block[i] = static_cast<int>(threadIdx.x * 10 + i / 4096);
  blocks[threadIdx.x] = block;
}

__global__ void give_back(int** blocks, long long* sums, size_t n) {
  int* block = blocks[threadIdx.x];
  long long s = 0;
  for (size_t i = 0; i < n; i += 4096) s += block[i];
  sums[threadIdx.x] = s;
  free(block);
}

__global__ void too_much(int** out) { out[0] = static_cast<int*>(malloc(size_t(1) << 40)); }

int main() {
  size_t limit;
  cudaDeviceGetLimit(&limit, cudaLimitMallocHeapSize);
  std::printf("default heap %zu MiB\n", limit >> 20);
  cudaDeviceSetLimit(cudaLimitMallocHeapSize, size_t(32) << 20);
  int** blocks;
  long long* sums;
  cudaMallocManaged(&blocks, 4 * sizeof(int*));
  cudaMallocManaged(&sums, 4 * sizeof(long long));
  const size_t n = (size_t(3) << 20) / sizeof(int);  // 3 MiB a thread
  take<<<1, 4>>>(blocks, n);
  cudaDeviceSynchronize();
  int null_blocks = 0;
  for (int t = 0; t < 4; ++t) null_blocks += blocks[t] == nullptr;
  std::printf("blocks taken: %d of 4\n", 4 - null_blocks);
  give_back<<<1, 4>>>(blocks, sums, n);
  cudaDeviceSynchronize();
  std::printf("sums %lld %lld %lld %lld\n", sums[0], sums[1], sums[2], sums[3]);
  too_much<<<1, 1>>>(blocks);
  cudaDeviceSynchronize();
  std::printf("a terabyte: %s\n", blocks[0] == nullptr ? "NULL" : "a block");
  std::printf("%s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
