// Kernels written with CUDA's libraries and intrinsics: CUB's block collectives,
// cooperative groups, the math library in float and double, the rounding intrinsics,
// atomics (plain and cuda::atomic_ref), cuda::barrier and cuda::pipeline with
// memcpy_async, a grid.sync() of a cooperative launch, a decoupled look-back scan, the SIMD intrinsics, clocks and extended-precision integer arithmetic
// in inline assembly.
// make_ptx.sh compiles it to libraries_sm80.ptx (sm_80) for
// tests/frontend/ptx/test_nvcc_libraries.py.
#include <cooperative_groups.h>
#include <cooperative_groups/memcpy_async.h>
#include <cooperative_groups/reduce.h>
#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/warp/warp_reduce.cuh>
#include <cuda/atomic>
#include <cuda/barrier>
#include <cuda/functional>
#include <cuda/pipeline>
namespace cg = cooperative_groups;

// cub::BlockReduce: one sum per block of 256 threads
extern "C" __global__ void block_sum(const float* in, float* out, int n) {
  using Reduce = cub::BlockReduce<float, 256>;
  __shared__ typename Reduce::TempStorage tmp;
  int i = blockIdx.x * 256 + threadIdx.x;
  float s = Reduce(tmp).Sum(i < n ? in[i] : 0.0f);
  if (threadIdx.x == 0) out[blockIdx.x] = s;
}

// cub::BlockScan: an exclusive prefix sum of 512 integers a block, 4 a thread
extern "C" __global__ void block_scan(const int* in, int* out, int* totals) {
  using Scan = cub::BlockScan<int, 128>;
  __shared__ typename Scan::TempStorage tmp;
  int items[4], total;
  int base = blockIdx.x * 512 + threadIdx.x * 4;
  for (int k = 0; k < 4; ++k) items[k] = in[base + k];
  Scan(tmp).ExclusiveSum(items, items, total);
  for (int k = 0; k < 4; ++k) out[base + k] = items[k];
  if (threadIdx.x == 0) totals[blockIdx.x] = total;
}

// cub::BlockRadixSort: 512 keys a block with their original positions as values
extern "C" __global__ void radix_sort(const unsigned* in, unsigned* out, int* where) {
  using Sort = cub::BlockRadixSort<unsigned, 128, 4, int>;
  __shared__ typename Sort::TempStorage tmp;
  unsigned keys[4];
  int pos[4];
  int base = blockIdx.x * 512 + threadIdx.x * 4;
  for (int k = 0; k < 4; ++k) { keys[k] = in[base + k]; pos[k] = base + k; }
  Sort(tmp).Sort(keys, pos);
  for (int k = 0; k < 4; ++k) { out[base + k] = keys[k]; where[base + k] = pos[k]; }
}

// warp collectives: cub::WarpReduce, redux, match, ballot, the counting barriers, and a
// cooperative-groups reduction over tiles of 16 (each half-warp its own member mask)
extern "C" __global__ void warp_ops(const int* in, int* out, int n) {
  using WarpMax = cub::WarpReduce<int>;
  __shared__ typename WarpMax::TempStorage tmp[4];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int v = i < n ? in[i] : 0;
  int mx = WarpMax(tmp[threadIdx.x / 32]).Reduce(v, cuda::maximum<>{});
  int sum = __reduce_add_sync(0xffffffffu, v);
  unsigned same = __match_any_sync(0xffffffffu, v & 7);
  unsigned ball = __ballot_sync(0xffffffffu, v > 0);
  int count = __syncthreads_count(v > 0);
  int all = __syncthreads_and(v > -100);
  int any = __syncthreads_or(v > 90);
  auto tile = cg::tiled_partition<16>(cg::this_thread_block());
  int tile_sum = cg::reduce(tile, v, cg::plus<int>());
  int tile_first = tile.shfl(v, 0);
  if (i < n) {
    int* o = out + 8 * i;
    o[0] = mx; o[1] = sum; o[2] = (int)same; o[3] = (int)ball;
    o[4] = count; o[5] = all + 2 * any; o[6] = tile_sum; o[7] = tile_first;
  }
}

// the math library in float (default flags: IEEE division and square root)
extern "C" __global__ void math_f32(const float* x, const float* y, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float a = x[i], b = y[i];
    float* o = out + 14 * i;
    o[0] = sinf(a); o[1] = cosf(a); o[2] = expf(a); o[3] = logf(fabsf(a));
    o[4] = powf(fabsf(a), b); o[5] = erff(a); o[6] = tanhf(a); o[7] = sqrtf(fabsf(a));
    o[8] = a / b; o[9] = atan2f(a, b); o[10] = cbrtf(a); o[11] = rsqrtf(fabsf(a));
    o[12] = __saturatef(a); o[13] = log1pf(fabsf(a));
  }
}

// the math library in double; sin and cos of huge arguments reduce with a carry chain
extern "C" __global__ void math_f64(const double* x, const double* y, double* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    double a = x[i], b = y[i];
    double* o = out + 7 * i;
    o[0] = sin(a); o[1] = cos(a); o[2] = exp(a); o[3] = log(fabs(a));
    o[4] = pow(fabs(a), b); o[5] = a / b; o[6] = sqrt(fabs(a));
  }
}

// atomics of every kind, and clocks that never run backwards around a back-off
extern "C" __global__ void atomics(const float* x, double* total, int* top, unsigned* bits,
                                   unsigned* ring, unsigned long long* backwards, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    unsigned long long c0 = clock64();
    unsigned t0 = clock();
    atomicAdd(total, (double)x[i]);
    atomicMax(top, __float_as_int(fabsf(x[i])));
    atomicOr(bits, 1u << (i % 32));
    atomicAnd(bits + 1, ~(1u << (i % 29)));
    atomicXor(bits + 2, (unsigned)i);
    atomicInc(ring, 9u);
    __nanosleep(100);
    __threadfence();
    unsigned long long c1 = clock64();
    if (c1 <= c0 || clock() - t0 == 0u) atomicAdd(backwards, 1ull);
  }
}

// CUDA's SIMD intrinsics on halves and bytes (vabsdiff4 among them)
extern "C" __global__ void simd(const unsigned* a, const unsigned* b, unsigned* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned x = a[i], y = b[i];
  unsigned* o = out + 40 * i;
  o[0] = __vabs2(x); o[1] = __vabs4(x); o[2] = __vabsdiffs2(x, y); o[3] = __vabsdiffs4(x, y);
  o[4] = __vabsdiffu2(x, y); o[5] = __vabsdiffu4(x, y); o[6] = __vabsss2(x);
  o[7] = __vabsss4(x); o[8] = __vadd2(x, y); o[9] = __vadd4(x, y); o[10] = __vaddss2(x, y);
  o[11] = __vaddss4(x, y); o[12] = __vaddus2(x, y); o[13] = __vaddus4(x, y);
  o[14] = __vavgs2(x, y); o[15] = __vavgs4(x, y); o[16] = __vavgu2(x, y);
  o[17] = __vavgu4(x, y); o[18] = __vcmpeq2(x, y); o[19] = __vcmpges4(x, y);
  o[20] = __vcmpgtu2(x, y); o[21] = __vcmpltu4(x, y); o[22] = __vhaddu2(x, y);
  o[23] = __vhaddu4(x, y); o[24] = __vmaxs2(x, y); o[25] = __vmaxu4(x, y);
  o[26] = __vmins4(x, y); o[27] = __vminu2(x, y); o[28] = __vneg2(x); o[29] = __vnegss4(x);
  o[30] = __vsads2(x, y); o[31] = __vsadu4(x, y); o[32] = __vseteq2(x, y);
  o[33] = __vsetges4(x, y); o[34] = __vsetltu2(x, y); o[35] = __vsub2(x, y);
  o[36] = __vsub4(x, y); o[37] = __vsubss2(x, y); o[38] = __vsubus4(x, y);
  o[39] = __vsetne4(x, y);
}

// 128-bit sums, differences and products through the carry flag, bit masks and
// bfind.shiftamt, in inline assembly as multiprecision code writes them
extern "C" __global__ void wide_ints(const uint4* a, const uint4* b, uint4* sum, uint4* diff,
                                     uint4* prod, unsigned* masks, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uint4 x = a[i], y = b[i], s, d, p;
  asm("add.cc.u32 %0, %4, %8;\n\taddc.cc.u32 %1, %5, %9;\n\t"
      "addc.cc.u32 %2, %6, %10;\n\taddc.u32 %3, %7, %11;"
      : "=r"(s.x), "=r"(s.y), "=r"(s.z), "=r"(s.w)
      : "r"(x.x), "r"(x.y), "r"(x.z), "r"(x.w), "r"(y.x), "r"(y.y), "r"(y.z), "r"(y.w));
  asm("sub.cc.u32 %0, %4, %8;\n\tsubc.cc.u32 %1, %5, %9;\n\t"
      "subc.cc.u32 %2, %6, %10;\n\tsubc.u32 %3, %7, %11;"
      : "=r"(d.x), "=r"(d.y), "=r"(d.z), "=r"(d.w)
      : "r"(x.x), "r"(x.y), "r"(x.z), "r"(x.w), "r"(y.x), "r"(y.y), "r"(y.z), "r"(y.w));
  // the low 64 bits of x times the low 64 bits of y, all 128 bits of the product
  asm("mul.lo.u32 %0, %4, %6;\n\tmul.hi.u32 %1, %4, %6;\n\t"
      "mad.lo.cc.u32 %1, %4, %7, %1;\n\tmadc.hi.u32 %2, %4, %7, 0;\n\t"
      "mad.lo.cc.u32 %1, %5, %6, %1;\n\tmadc.hi.cc.u32 %2, %5, %6, %2;\n\t"
      "madc.hi.u32 %3, %5, %7, 0;\n\tmad.lo.cc.u32 %2, %5, %7, %2;\n\taddc.u32 %3, %3, 0;"
      : "=&r"(p.x), "=&r"(p.y), "=&r"(p.z), "=&r"(p.w)
      : "r"(x.x), "r"(x.y), "r"(y.x), "r"(y.y));
  sum[i] = s; diff[i] = d; prod[i] = p;
  unsigned m0, m1, m2;
  asm("bmsk.clamp.b32 %0, %1, %2;" : "=r"(m0) : "r"(x.x & 63), "r"(y.x & 63));
  asm("bmsk.wrap.b32 %0, %1, %2;" : "=r"(m1) : "r"(x.x & 63), "r"(y.x & 63));
  asm("bfind.shiftamt.u32 %0, %1;" : "=r"(m2) : "r"(x.y >> (y.y & 31)));
  masks[3 * i] = m0; masks[3 * i + 1] = m1; masks[3 * i + 2] = m2;
}

// CUDA's rounding intrinsics: each operation rounded toward zero, -inf or +inf
extern "C" __global__ void rounding(const float* x, const float* y, const double* u,
                                    float* out, double* wide, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float a = x[i], b = y[i];
  float* f = out + 8 * i;
  f[0] = __fdiv_rz(a, b); f[1] = __fsqrt_rd(fabsf(a)); f[2] = __frcp_ru(b);
  f[3] = __fmul_rz(a, b); f[4] = __fadd_rd(a, b); f[5] = __fmaf_ru(a, b, 1.0f);
  f[6] = (float)__float2int_rd(a); f[7] = __fdiv_ru(1.0f, a);
  double v = u[i];
  double* d = wide + 4 * i;
  d[0] = __fma_rz(v, v, 1.0); d[1] = __ddiv_ru(v, 3.0); d[2] = __dsqrt_rd(fabs(v));
  d[3] = __drcp_rz(v);
}

// cuda::memcpy_async into shared memory, completed through a cuda::barrier (sm_80's
// mbarrier and cp.async.mbarrier.arrive); each thread reads another thread's copy
extern "C" __global__ void barrier_copy(const int* in, int* out) {
  __shared__ int buf[256];
#pragma nv_diag_suppress static_var_with_dynamic_init
  __shared__ cuda::barrier<cuda::thread_scope_block> bar;
  auto block = cg::this_thread_block();
  if (block.thread_rank() == 0) init(&bar, block.size());
  block.sync();
  cuda::memcpy_async(block, buf, in + blockIdx.x * 256, sizeof(int) * 256, bar);
  bar.arrive_and_wait();
  out[blockIdx.x * 256 + threadIdx.x] = buf[255 - threadIdx.x];
}

// a two-stage cuda::pipeline over four blocks of 128 integers
extern "C" __global__ void pipeline_sum(const int* in, int* out) {
  __shared__ int buf[2][128];
  auto block = cg::this_thread_block();
  __shared__ cuda::pipeline_shared_state<cuda::thread_scope_block, 2> state;
  auto pipe = cuda::make_pipeline(block, &state);
  int acc = 0;
  for (int s = 0; s < 4; ++s) {
    pipe.producer_acquire();
    cuda::memcpy_async(block, buf[s % 2], in + s * 128, sizeof(int) * 128, pipe);
    pipe.producer_commit();
    pipe.consumer_wait();
    acc += buf[s % 2][threadIdx.x];
    pipe.consumer_release();
  }
  out[threadIdx.x] = acc;
}

// cuda::atomic_ref with memory orders and scopes, and the scoped atomics
extern "C" __global__ void scoped_atomics(int* x, unsigned long long* first, float* flag) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  cuda::atomic_ref<int, cuda::thread_scope_device> count(x[0]);
  count.fetch_add(1, cuda::memory_order_relaxed);
  cuda::atomic_ref<int, cuda::thread_scope_block> top(x[1]);
  top.fetch_max(i, cuda::memory_order_acq_rel);
  atomicCAS(first, 0ull, (unsigned long long)i + 1);
  atomicExch(flag, 1.5f);
  atomicAdd_block(x + 2, 1);
  __threadfence_block();
  __syncwarp();
  if (__isGlobal(x)) atomicAdd_system(x + 3, 1);
}

// a grid-wide sum through cooperative groups' grid.sync() (a cooperative launch)
extern "C" __global__ void grid_sum(const int* in, int* partial, int* total) {
  cg::grid_group grid = cg::this_grid();
  auto block = cg::this_thread_block();
  int v = cg::reduce(cg::tiled_partition<32>(block), in[grid.thread_rank()], cg::plus<int>());
  if (block.thread_rank() % 32 == 0) atomicAdd(partial + blockIdx.x, v);
  grid.sync();
  if (grid.thread_rank() == 0) {
    int s = 0;
    for (unsigned b = 0; b < gridDim.x; ++b) s += partial[b];
    *total = s;
  }
}

// a single-pass prefix sum with decoupled look-back, as CUB's device-wide scan works:
// each block publishes its aggregate, then its inclusive prefix, while its thread 0
// spins on its predecessors' flags (blocks take their order from a ticket)
extern "C" __global__ void lookback_scan(const int* in, int* out,
                                         volatile unsigned long long* status, int* ticket) {
  __shared__ int order, prefix;
  __shared__ int sums[256];
  if (threadIdx.x == 0) order = atomicAdd(ticket, 1);
  __syncthreads();
  int b = order;
  sums[threadIdx.x] = in[b * 256 + threadIdx.x];
  __syncthreads();
  for (int offset = 1; offset < 256; offset *= 2) {
    int t = threadIdx.x >= offset ? sums[threadIdx.x - offset] : 0;
    __syncthreads();
    sums[threadIdx.x] += t;
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    int total = sums[255], before = 0;
    if (b > 0) {
      status[b] = (1ull << 32) | (unsigned)total;  // aggregate available
      for (int j = b - 1;; --j) {
        unsigned long long s;
        do { s = status[j]; } while ((s >> 32) == 0);
        before += (int)(unsigned)s;
        if ((s >> 32) == 2) break;  // an inclusive prefix: done
      }
    }
    status[b] = (2ull << 32) | (unsigned)(before + total);
    prefix = before;
  }
  __syncthreads();
  out[b * 256 + threadIdx.x] = prefix + sums[threadIdx.x];
}
