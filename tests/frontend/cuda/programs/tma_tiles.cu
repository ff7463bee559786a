// TMA: a tensor map made with cuTensorMapEncodeTiled (found through
// cudaGetDriverEntryPointByVersion, as the CUDA C++ Programming Guide's example finds it),
// each CTA's 32x32 tile copied into shared memory by cp.async.bulk.tensor on a
// cuda::barrier, then doubled into the output. With `unaligned` the map's row stride is
// not a multiple of 16 bytes, which the encoder refuses.
#include <cuda.h>
#include <cuda/barrier>

#include <cstdio>
#include <cstring>

using barrier = cuda::barrier<cuda::thread_scope_block>;
namespace cde = cuda::device::experimental;

__global__ void twice(const __grid_constant__ CUtensorMap in, float* out, int cols) {
  __shared__ alignas(128) float tile[32][32];
  __shared__ barrier bar;
  int x0 = blockIdx.x * 32, y0 = blockIdx.y * 32;
  if (threadIdx.x == 0) {
    init(&bar, blockDim.x);
    cde::fence_proxy_async_shared_cta();
  }
  __syncthreads();
  barrier::arrival_token token;
  if (threadIdx.x == 0) {
    cde::cp_async_bulk_tensor_2d_global_to_shared(&tile, &in, x0, y0, bar);
    token = cuda::device::barrier_arrive_tx(bar, 1, sizeof(tile));
  } else {
    token = bar.arrive();
  }
  bar.wait(std::move(token));
  for (int i = threadIdx.x; i < 32 * 32; i += blockDim.x)
    out[(y0 + i / 32) * cols + x0 + i % 32] = 2 * tile[i / 32][i % 32];
}

int main(int argc, char** argv) {
  const int rows = 64, cols = 96;
  float *in, *out;
  cudaMallocManaged(&in, rows * cols * sizeof(float));
  cudaMallocManaged(&out, rows * cols * sizeof(float));
  for (int i = 0; i < rows * cols; ++i) in[i] = static_cast<float>(i % 1000);
  void* encode = nullptr;
  cudaDriverEntryPointQueryResult found;
  cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &encode, 12000, cudaEnableDefault,
                                   &found);
  auto encode_tiled = reinterpret_cast<decltype(&cuTensorMapEncodeTiled)>(encode);
  bool unaligned = argc > 1 && !std::strcmp(argv[1], "unaligned");
  CUtensorMap map;
  cuuint64_t dims[2] = {cols, rows}, strides[1] = {cols * sizeof(float) + (unaligned ? 4 : 0)};
  cuuint32_t box[2] = {32, 32}, steps[2] = {1, 1};
  CUresult encoded = encode_tiled(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, in, dims, strides,
                                  box, steps, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                  CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  std::printf("found %d, encoded %d\n", found == cudaDriverEntryPointSuccess,
              encoded == CUDA_SUCCESS);
  if (encoded != CUDA_SUCCESS) return 0;
  twice<<<dim3(cols / 32, rows / 32), 128>>>(map, out, cols);
  cudaDeviceSynchronize();
  double sum = 0;
  for (int i = 0; i < rows * cols; ++i) sum += out[i];
  std::printf("out[0] %g out[%d] %g sum %.1f, %s\n", out[0], rows * cols - 1,
              out[rows * cols - 1], sum, cudaGetErrorString(cudaGetLastError()));
  return 0;
}
