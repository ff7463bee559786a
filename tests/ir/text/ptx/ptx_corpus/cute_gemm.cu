// A Hopper GEMM written with CuTe (CUTLASS's layout algebra), for the PTX corpus: C = A B^T
// with A (M x K) and B (N x K) half-precision and K-major, C (M x N) float and row-major.
// Each CTA computes a 128 x 128 tile of C with one warpgroup: thread 0 feeds a ring of
// three stages by TMA (each stage completes on a transaction-count mbarrier), the
// warpgroup multiplies each stage with wgmma (128-byte swizzled operands, f32
// accumulators) and releases it on a second mbarrier that all 128 threads arrive on,
// which thread 0 waits for before it refills the stage. The kernel runs in clusters of
// two CTAs (__cluster_dims__), which synchronise once, after the barriers' initialisation.
// make_cute_ptx.sh compiles it; only its device code is kept (cute_gemm_sm90a.ptx).
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

using namespace cute;

constexpr int kStages = 3;

template <class LayoutA, class LayoutB>
struct alignas(1024) GemmStorage {
  ArrayEngine<half_t, cosize_v<LayoutA>> a;  // (128, 64, stages), 128-byte swizzled
  ArrayEngine<half_t, cosize_v<LayoutB>> b;
  uint64_t full[kStages];   // a stage's TMA data landed
  uint64_t empty[kStages];  // the warpgroup is done with a stage
};

template <class Problem, class Tile, class TmaA, class TmaB, class LayoutA, class LayoutB,
          class Mma>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(128)
cute_gemm(Problem mnk, Tile tile, CUTE_GRID_CONSTANT TmaA const tma_a,
          CUTE_GRID_CONSTANT TmaB const tma_b, float* c, int ldc, Mma mma) {
  using Full = cutlass::arch::ClusterTransactionBarrier;
  using Empty = cutlass::arch::ClusterBarrier;
  extern __shared__ __align__(1024) char smem[];
  auto& storage = *reinterpret_cast<GemmStorage<LayoutA, LayoutB>*>(smem);

  auto [m, n, k] = mnk;
  Tensor ga = local_tile(tma_a.get_tma_tensor(make_shape(m, k)), tile,
                         make_coord(blockIdx.x, blockIdx.y, _), Step<_1, X, _1>{});
  Tensor gb = local_tile(tma_b.get_tma_tensor(make_shape(n, k)), tile,
                         make_coord(blockIdx.x, blockIdx.y, _), Step<X, _1, _1>{});
  Tensor gc = local_tile(make_tensor(make_gmem_ptr(c), make_shape(m, n), make_stride(ldc, _1{})),
                         tile, make_coord(blockIdx.x, blockIdx.y, _), Step<_1, _1, X>{});
  Tensor sa = make_tensor(make_smem_ptr(storage.a.begin()), LayoutA{});
  Tensor sb = make_tensor(make_smem_ptr(storage.b.begin()), LayoutB{});
  // (TMA, tile) in global memory and (TMA, stage) in shared memory: one load per stage
  auto parts_a = tma_partition(tma_a, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sa),
                               group_modes<0, 2>(ga));
  auto parts_b = tma_partition(tma_b, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sb),
                               group_modes<0, 2>(gb));
  auto load_a = get<0>(parts_a);
  auto to_a = get<1>(parts_a);
  auto load_b = get<0>(parts_b);
  auto to_b = get<1>(parts_b);
  constexpr uint32_t stage_bytes =
      (size<0>(LayoutA{}) * size<1>(LayoutA{}) + size<0>(LayoutB{}) * size<1>(LayoutB{})) *
      sizeof(half_t);
  int tiles = size<1>(load_a);
  bool leader = threadIdx.x == 0;

  auto fill = [&](int stage, int t) {
    Full::arrive_and_expect_tx(&storage.full[stage], stage_bytes);
    copy(tma_a.with(storage.full[stage]), load_a(_, t), to_a(_, stage));
    copy(tma_b.with(storage.full[stage]), load_b(_, t), to_b(_, stage));
  };
  if (leader) {
    for (int s = 0; s < kStages; ++s) {
      Full::init(&storage.full[s], 1);
      Empty::init(&storage.empty[s], 128);
    }
  }
  cluster_sync();  // the barriers' initialisation, visible to the cluster
  if (leader) {
    for (int s = 0; s < kStages && s < tiles; ++s) fill(s, s);
  }

  auto thread = mma.get_slice(threadIdx.x);
  Tensor frag_a = thread.make_fragment_A(thread.partition_A(sa));  // descriptors per stage
  Tensor frag_b = thread.make_fragment_B(thread.partition_B(sb));
  Tensor out = thread.partition_C(gc);
  Tensor acc = thread.make_fragment_C(out);
  clear(acc);
  for (int t = 0; t < tiles; ++t) {
    int stage = t % kStages;
    uint32_t phase = (t / kStages) & 1;
    Full::wait(&storage.full[stage], phase);
    warpgroup_fence_operand(acc);
    warpgroup_arrive();
    gemm(mma, frag_a(_, _, _, stage), frag_b(_, _, _, stage), acc);
    warpgroup_commit_batch();
    warpgroup_wait<0>();
    warpgroup_fence_operand(acc);
    Empty::arrive(&storage.empty[stage]);
    if (leader && t + kStages < tiles) {
      Empty::wait(&storage.empty[stage], phase);
      fill(stage, t + kStages);
    }
  }
  copy(acc, out);
}

// The host side, which only makes the kernel's types (nothing here runs).
void cute_gemm_launch(int m, int n, int k, half_t const* a, half_t const* b, float* c) {
  auto tile = make_shape(Int<128>{}, Int<128>{}, Int<64>{});
  auto layout_a = tile_to_shape(GMMA::Layout_K_SW128_Atom<half_t>{},
                                make_shape(Int<128>{}, Int<64>{}, Int<kStages>{}));
  auto layout_b = tile_to_shape(GMMA::Layout_K_SW128_Atom<half_t>{},
                                make_shape(Int<128>{}, Int<64>{}, Int<kStages>{}));
  auto tma_a = make_tma_atom(SM90_TMA_LOAD{}, make_tensor(a, make_shape(m, k), make_stride(k, _1{})),
                             layout_a(_, _, 0), make_shape(Int<128>{}, Int<64>{}));
  auto tma_b = make_tma_atom(SM90_TMA_LOAD{}, make_tensor(b, make_shape(n, k), make_stride(k, _1{})),
                             layout_b(_, _, 0), make_shape(Int<128>{}, Int<64>{}));
  auto mma = make_tiled_mma(SM90_64x128x16_F32F16F16_SS<GMMA::Major::K, GMMA::Major::K>{});
  auto mnk = make_shape(m, n, k);
  auto kernel = &cute_gemm<decltype(mnk), decltype(tile), decltype(tma_a), decltype(tma_b),
                           decltype(layout_a), decltype(layout_b), decltype(mma)>;
  int bytes = int(sizeof(GemmStorage<decltype(layout_a), decltype(layout_b)>));
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  kernel<<<dim3(m / 128, n / 128), 128, bytes>>>(mnk, tile, tma_a, tma_b, c, n, mma);
}
