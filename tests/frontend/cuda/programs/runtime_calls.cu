// Runtime calls programs and libraries make beside launches: a __device__ variable's
// address for a kernel (cudaGetSymbolAddress), pointer attributes, the profiler's range,
// peers of the one device, the default memory pool and a copy between "devices" 0 and 0.
// Host code that writes a __device__ variable writes its host shadow, which kernels never
// see (nvcc warns; the program shows it), and which nvcc gives no initial value.
#include <cuda_profiler_api.h>

#include <cstdio>

__device__ int table[8] = {1, 2, 3, 4, 5, 6, 7, 8};

__global__ void twice(int* p) { p[threadIdx.x] *= 2; }

int main() {
  table[0] = 100;  // the host shadow only
  int* address;
  size_t size;
  cudaGetSymbolAddress(reinterpret_cast<void**>(&address), table);
  cudaGetSymbolSize(&size, table);
  cudaProfilerStart();
  twice<<<1, 8>>>(address);
  cudaProfilerStop();
  int host[8];
  cudaMemcpyFromSymbol(host, table, sizeof host);
  std::printf("symbol of %zu bytes: %d %d, shadow %d %d\n", size, host[0], host[7], table[0],
              table[7]);

  int* managed;
  cudaMallocManaged(&managed, 16);
  cudaPointerAttributes attrs;
  cudaPointerGetAttributes(&attrs, managed);
  int is_managed = attrs.type == cudaMemoryTypeManaged;
  cudaPointerGetAttributes(&attrs, address);
  int is_device = attrs.type == cudaMemoryTypeDevice;
  cudaPointerGetAttributes(&attrs, host);
  std::printf("managed %d, symbol device %d, stack unregistered %d\n", is_managed, is_device,
              attrs.type == cudaMemoryTypeUnregistered);

  int can;
  cudaDeviceCanAccessPeer(&can, 0, 0);
  cudaMemPool_t pool;
  cudaDeviceGetDefaultMemPool(&pool, 0);
  unsigned long long keep = ~0ull;
  cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  int* pooled;
  cudaMallocFromPoolAsync(reinterpret_cast<void**>(&pooled), 16, pool, stream);
  for (int i = 0; i < 4; ++i) managed[i] = 10 * i;
  cudaMemcpyPeer(pooled, 0, managed, 0, 16);
  cudaStreamSynchronize(stream);
  int back[4];
  cudaMemcpy(back, pooled, sizeof back, cudaMemcpyDeviceToHost);
  cudaFreeAsync(pooled, stream);
  cudaStreamSynchronize(stream);
  cudaFree(managed);
  std::printf("peer access %d, pooled copy %d %d, %s\n", can, back[1], back[3],
              cudaGetErrorString(cudaGetLastError()));
  return 0;
}
