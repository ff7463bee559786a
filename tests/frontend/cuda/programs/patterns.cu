// Common CUDA patterns in one program, each printing integers a test can recompute: a
// shared-memory tiled matrix product (dynamic shared memory, opted in above 48 KB), a
// warp-shuffle reduction with atomics, a cooperative grid-wide sync, streams and events
// with asynchronous copies, and a __constant__ table.
#include <cooperative_groups.h>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

namespace cg = cooperative_groups;

#define CHECK(call)                                                             \
  do {                                                                          \
    cudaError_t e = (call);                                                     \
    if (e != cudaSuccess) {                                                     \
      printf("%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e));         \
      exit(2);                                                                  \
    }                                                                           \
  } while (0)

__constant__ int weights[4];

template <int T>
__global__ void matmul(const int* a, const int* b, int* c, int n) {
  extern __shared__ int tiles[];  // T*T of a, then T*T of b
  int* ta = tiles;
  int* tb = tiles + T * T;
  int row = blockIdx.y * T + threadIdx.y, col = blockIdx.x * T + threadIdx.x;
  int acc = 0;
  for (int k0 = 0; k0 < n; k0 += T) {
    ta[threadIdx.y * T + threadIdx.x] = a[row * n + k0 + threadIdx.x];
    tb[threadIdx.y * T + threadIdx.x] = b[(k0 + threadIdx.y) * n + col];
    __syncthreads();
    for (int k = 0; k < T; ++k) acc += ta[threadIdx.y * T + k] * tb[k * T + threadIdx.x];
    __syncthreads();
  }
  c[row * n + col] = acc * weights[(row + col) % 4];
}

__global__ void warp_sum(const int* x, int n, unsigned long long* total) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int v = i < n ? x[i] : 0;
  for (int d = 16; d > 0; d /= 2) v += __shfl_down_sync(0xffffffffu, v, d);
  if (threadIdx.x % 32 == 0) atomicAdd(total, (unsigned long long)(long long)v);
}

__global__ void grid_scan(int* x, int* partial, int n) {
  cg::grid_group grid = cg::this_grid();
  int i = grid.thread_rank();
  if (i < n) atomicAdd(&partial[blockIdx.x], x[i]);
  grid.sync();
  if (i < n && threadIdx.x == 0) {
    int before = 0;
    for (int b = 0; b < blockIdx.x; ++b) before += partial[b];
    x[i] = before;  // each block's first element: the sum of the blocks before it
  }
}

int main() {
  const int n = 64, T = 16;
  int h_weights[4] = {1, 2, 3, -1};
  CHECK(cudaMemcpyToSymbol(weights, h_weights, sizeof h_weights));
  int *a, *b, *c;
  CHECK(cudaMallocManaged(&a, n * n * sizeof(int)));
  CHECK(cudaMallocManaged(&b, n * n * sizeof(int)));
  CHECK(cudaMallocManaged(&c, n * n * sizeof(int)));
  for (int i = 0; i < n * n; ++i) { a[i] = i % 7 - 3; b[i] = i % 5 - 2; }
  size_t shared = 2 * T * T * sizeof(int);
  CHECK(cudaFuncSetAttribute(matmul<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10));
  matmul<T><<<dim3(n / T, n / T), dim3(T, T), shared>>>(a, b, c, n);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  long long check = 0;
  for (int i = 0; i < n * n; ++i) check += (long long)c[i] * (i % 13 + 1);
  printf("matmul %lld\n", check);

  const int m = 5000;
  int* x;
  unsigned long long* total;
  CHECK(cudaMalloc(&x, m * sizeof(int)));
  CHECK(cudaMalloc(&total, sizeof *total));
  int* hx = (int*)malloc(m * sizeof(int));
  for (int i = 0; i < m; ++i) hx[i] = (i * 37) % 101 - 50;
  cudaStream_t s;
  cudaEvent_t start, stop;
  CHECK(cudaStreamCreate(&s));
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  CHECK(cudaEventRecord(start, s));
  CHECK(cudaMemcpyAsync(x, hx, m * sizeof(int), cudaMemcpyHostToDevice, s));
  CHECK(cudaMemsetAsync(total, 0, sizeof *total, s));
  warp_sum<<<(m + 255) / 256, 256, 0, s>>>(x, m, total);
  unsigned long long sum = 0;
  CHECK(cudaMemcpyAsync(&sum, total, sizeof sum, cudaMemcpyDeviceToHost, s));
  CHECK(cudaEventRecord(stop, s));
  CHECK(cudaStreamSynchronize(s));
  float ms = -1;
  CHECK(cudaEventElapsedTime(&ms, start, stop));
  printf("warp_sum %lld %s\n", (long long)sum, ms >= 0 ? "timed" : "untimed");

  const int blocks = 4, threads = 128;
  int* partial;
  CHECK(cudaMalloc(&partial, blocks * sizeof(int)));
  CHECK(cudaMemset(partial, 0, blocks * sizeof(int)));
  int count = blocks * threads;
  void* args[] = {&x, &partial, &count};
  CHECK(cudaLaunchCooperativeKernel((void*)grid_scan, blocks, threads, args, 0, 0));
  CHECK(cudaMemcpy(hx, x, blocks * threads * sizeof(int), cudaMemcpyDeviceToHost));
  printf("grid_scan %d %d %d %d\n", hx[0], hx[threads], hx[2 * threads], hx[3 * threads]);
  return 0;
}
