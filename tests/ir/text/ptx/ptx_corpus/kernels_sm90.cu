// Kernels of CUDA's half-precision, fp8 and device-function features, compiled by
// make_ptx.sh to kernels_sm90.ptx (sm_90) for tests/frontend/ptx/test_nvcc_sm90_corpus.py.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

// packed f16x2 arithmetic: add, sub, mul, fma, neg, abs, min, max (and exp2 through f32)
extern "C" __global__ void half2_ops(const __half2* a, const __half2* b, __half2* out,
                                     __half2* e, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    __half2 x = a[i], y = b[i];
    __half2 s = __hadd2(x, y);
    __half2 p = __hmul2(x, y);
    __half2 f = __hfma2(x, y, s);
    __half2 m = __hmax2(__hneg2(p), __habs2(f));
    out[i] = __hsub2(m, __hmin2(x, y));
    e[i] = h2exp2(x);
  }
}

// packed bf16x2 arithmetic (add and mul are sm_90 instructions)
extern "C" __global__ void bf162_ops(const __nv_bfloat162* a, const __nv_bfloat162* b,
                                     __nv_bfloat162* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    __nv_bfloat162 x = a[i], y = b[i];
    __nv_bfloat162 f = __hfma2(x, y, x);
    __nv_bfloat162 m = __hmax2(__hneg2(f), __habs2(y));
    out[i] = __hadd2(m, __hmul2(x, f));
  }
}

// fp8 pairs: f32 pairs to e4m3, e4m3 to f16, f16 pairs to e5m2
extern "C" __global__ void fp8_pairs(const float2* in, __nv_fp8x2_e4m3* q4, __half2* back,
                                     __nv_fp8x2_e5m2* q5, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    __nv_fp8x2_e4m3 e(in[i]);
    q4[i] = e;
    __half2 h = __half2(e);
    back[i] = h;
    q5[i] = __nv_fp8x2_e5m2(__hmul2(h, h));
  }
}

// half-precision atomics: f16, bf16 and f16x2 adds, and a 16-bit compare-and-swap
extern "C" __global__ void half_atomics(const float* in, __half* h, __nv_bfloat16* bh,
                                        __half2* h2, unsigned short* flag, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    atomicAdd(h + i % 4, __float2half(in[i]));
    atomicAdd(bh + i % 4, __float2bfloat16(in[i]));
    atomicAdd(h2 + i % 2, __floats2half2_rn(in[i], -2.0f * in[i]));
    atomicCAS(flag + i % 8, (unsigned short)0, (unsigned short)(i + 1));
  }
}

// device functions that nvcc keeps as calls: scalars, a structure by value, a nested
// call, a loop and an early return inside the callee
struct Triple { float x, y, z; };

__device__ __noinline__ float weigh(float v, int k) { return v * k + 1.0f; }

__device__ __noinline__ float dot3(Triple a, Triple b) {
  return a.x * b.x + a.y * b.y + a.z * b.z;
}

__device__ __noinline__ int digits(unsigned v) {
  if (v == 0) return 1;
  int d = 0;
  while (v) { v /= 10; ++d; }
  return d;
}

__device__ __noinline__ float outer(float v, int k) { return weigh(v, k) + weigh(v, -k); }

extern "C" __global__ void device_calls(const float* in, float* out, int* nd, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float v = in[i];
    Triple a{v, 1.0f, -v}, b{2.0f, v, 0.5f};
    out[i] = weigh(v, i) + dot3(a, b) + outer(v, i % 5);
    nd[i] = digits((unsigned)(i * 977));
  }
}

// printf: integers of every length, floats promoted to double, a string, a character,
// a pointer, widths, precisions and flags
extern "C" __global__ void formatted(const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    printf("%d/%u: x=%f %.3e %g|%8.2f|%-6d|%+d|%05x|%#o|%s|%c|%lld|%hd|%p\n", i, n, x[i],
           (double)x[i] * 1e6, x[i] / 3, x[i], i, -i, i * 4099, i, i % 2 ? "odd" : "even",
           'A' + i % 26, (long long)i << 40, (short)(i * 5000), x + i);
  }
  if (i == 0) printf("done\n");
}

// Hopper's bulk copy as CUB writes it (cuda::ptx): one thread announces the bytes on an
// mbarrier (a count in a register) and issues one cp.async.bulk of the CTA's tile; all
// wait on the barrier's phase. A programmatic dependent launch waits for the grid
// before it and lets the next one start. elect.sync with the member mask in a register
// picks the lowest lane of each half-warp.
#include <cstdint>
#include <cuda/ptx>

extern "C" __global__ void bulk_double(const float* in, float* out, int* elected, int n) {
  __shared__ alignas(128) float tile[256];
  __shared__ uint64_t bar;
  cudaGridDependencySynchronize();
  const unsigned bytes = n * sizeof(float);  // n <= 256, a multiple of 4
  if (threadIdx.x == 0) cuda::ptx::mbarrier_init(&bar, 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cta,
                                         cuda::ptx::space_shared, &bar, bytes);
    cuda::ptx::cp_async_bulk(cuda::ptx::space_shared, cuda::ptx::space_global, tile,
                             in + blockIdx.x * n, bytes, &bar);
  }
  while (!cuda::ptx::mbarrier_try_wait_parity(&bar, 0)) {
  }
  if (threadIdx.x < n) out[blockIdx.x * n + threadIdx.x] = 2 * tile[threadIdx.x];
  unsigned half = threadIdx.x % 32 >= 16 ? 0xFFFF0000u : 0x0000FFFFu;
  if (cuda::ptx::elect_sync(half)) atomicAdd(elected, 1);
  cudaTriggerProgrammaticLaunchCompletion();
}

// Distributed shared memory: a histogram of `bins` bins split across the CTAs of a
// cluster of 2 (bins / 2 in each CTA's shared memory). Each thread adds its value's bin in
// whichever CTA holds it, through cooperative groups' map_shared_rank; cluster.sync()
// before (every CTA's bins zeroed) and after (every add landed) the adds, then each CTA
// adds its half to the grid's histogram.
#include <cooperative_groups.h>

extern "C" __global__ void __cluster_dims__(2, 1, 1) cluster_histogram(const int* values,
                                                                        int* histogram, int n,
                                                                        int bins) {
  extern __shared__ int part[];
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const int per_cta = bins / 2;
  for (int b = threadIdx.x; b < per_cta; b += blockDim.x) part[b] = 0;
  cluster.sync();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    int bin = min(max(values[i], 0), bins - 1);
    int* owner = cluster.map_shared_rank(part, bin / per_cta);
    atomicAdd(owner + bin % per_cta, 1);
  }
  cluster.sync();
  const int first = cluster.block_rank() * per_cta;
  for (int b = threadIdx.x; b < per_cta; b += blockDim.x)
    atomicAdd(&histogram[first + b], part[b]);
}

// TMA multicast and arrivals on another CTA's mbarrier, as a 2-CTA cluster pipeline
// shares its loads: each CTA of a cluster of 2 loads half of a 32x32 tile (16 rows) and
// multicasts it to both CTAs' `tile`, whose `full` barriers expect both halves; each CTA
// writes the whole tile, scaled by its rank + 1, then tells the other, by an arrival on
// its `empty` barrier, that it is done, and waits for the other's arrival on its own.
#include <cuda.h>

extern "C" __global__ void __cluster_dims__(2, 1, 1) multicast_tile(
    const __grid_constant__ CUtensorMap map, float* out) {
  __shared__ alignas(128) float tile[32][32];
  __shared__ uint64_t full, empty;
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank();
  if (threadIdx.x == 0) {
    cuda::ptx::mbarrier_init(&full, 1);
    cuda::ptx::mbarrier_init(&empty, 1);
    cuda::ptx::fence_mbarrier_init(cuda::ptx::sem_release, cuda::ptx::scope_cluster);
  }
  cluster.sync();  // both CTAs' barriers are initialised before any copy or arrival
  if (threadIdx.x == 0) {
    cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cta,
                                         cuda::ptx::space_shared, &full, sizeof(tile));
    const int32_t at[2] = {0, static_cast<int32_t>(32 * (blockIdx.x / 2) + 16 * rank)};
    cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_cluster, cuda::ptx::space_global,
                                    &tile[16 * rank][0], &map, at, &full, uint16_t{0x3});
  }
  while (!cuda::ptx::mbarrier_try_wait_parity(&full, 0)) {
  }
  for (int i = threadIdx.x; i < 32 * 32; i += blockDim.x)
    out[blockIdx.x * 1024 + i] = (rank + 1) * tile[i / 32][i % 32];
  __syncthreads();
  if (threadIdx.x == 0) {
    uint64_t* other = cluster.map_shared_rank(&empty, rank ^ 1);
    cuda::ptx::mbarrier_arrive(cuda::ptx::sem_release, cuda::ptx::scope_cluster,
                               cuda::ptx::space_cluster, other);
    while (!cuda::ptx::mbarrier_try_wait_parity(&empty, 0)) {
    }
  }
  cluster.sync();
}
