// CUDA kernels whose nvcc-generated PTX the CPU checker reads (see make_ptx.sh).
// cp.async through inline PTX: the pipeline headers need CCCL, which the wheel lacks
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" :: "n"(N));
}

extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// one partial sum per block: a shared-memory tree (blockDim.x == 256)
extern "C" __global__ void reduce_tree(const float* in, float* out, int n) {
  __shared__ float sdata[256];
  unsigned tid = threadIdx.x;
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  sdata[tid] = i < n ? in[i] : 0.0f;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) sdata[tid] += sdata[tid + s];
    __syncthreads();
  }
  if (tid == 0) out[blockIdx.x] = sdata[0];
}

// the same with dynamic shared memory (any power-of-two block)
extern "C" __global__ void reduce_dynamic(const float* in, float* out, int n) {
  extern __shared__ float buf[];
  unsigned tid = threadIdx.x;
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  buf[tid] = i < n ? in[i] : 0.0f;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) buf[tid] += buf[tid + s];
    __syncthreads();
  }
  if (tid == 0) out[blockIdx.x] = buf[0];
}

// one sum per warp with shuffles, grid-stride input loop
extern "C" __global__ void warp_sum(const float* in, float* out, int n) {
  float v = 0.0f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    v += in[i];
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  if ((threadIdx.x & 31) == 0) out[warp] = v;
}

// copy through shared memory with cp.async, two stages (blockDim.x == 128, 4 floats each)
extern "C" __global__ void cp_async_copy(const float4* in, float4* out, int tiles) {
  __shared__ float4 stage[2][128];
  int t = threadIdx.x;
  const float4* src = in + blockIdx.x * tiles * 128;
  float4* dst = out + blockIdx.x * tiles * 128;
  cp_async16(&stage[0][t], &src[t]);
  cp_async_commit();
  for (int k = 0; k < tiles; ++k) {
    if (k + 1 < tiles)
      cp_async16(&stage[(k + 1) & 1][t], &src[(k + 1) * 128 + t]);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    float4 v = stage[k & 1][(t + 1) % 128];  // read a neighbour's copy
    dst[k * 128 + t] = make_float4(2.0f * v.x, v.y + 1.0f, v.z, -v.w);
    __syncthreads();
  }
}

// per-thread trip counts (divergent loops), integer bit tricks and a 64-bit product
extern "C" __global__ void collatz_bits(const unsigned* in, unsigned* steps, unsigned* bits,
                                        unsigned long long* wide, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned x = in[i], c = 0;
  while (x > 1 && c < 1000) {
    x = (x & 1) ? 3 * x + 1 : x >> 1;
    ++c;
  }
  steps[i] = c;
  unsigned v = in[i];
  bits[i] = __popc(v) + (__clz(v | 1) << 8) + (__brev(v) & 0xff0000u) +
            (__byte_perm(v, c, 0x4210) & 0xff000000u) ^ __funnelshift_l(v, c, 7);
  wide[i] = (unsigned long long)v * (unsigned long long)(c + 12345u) + (long long)(int)v;
}

// 32x32 tiles through padded shared memory, 2-D blocks (32 x 8)
extern "C" __global__ void transpose(const float* in, float* out, int rows, int cols) {
  __shared__ float tile[32][33];
  int x = blockIdx.x * 32 + threadIdx.x;
  int y = blockIdx.y * 32 + threadIdx.y;
  for (int j = 0; j < 32; j += 8)
    if (x < cols && y + j < rows) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * cols + x];
  __syncthreads();
  x = blockIdx.y * 32 + threadIdx.x;
  y = blockIdx.x * 32 + threadIdx.y;
  for (int j = 0; j < 32; j += 8)
    if (x < rows && y + j < cols) out[(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
}

// histogram of bytes: shared atomics, then global atomics
extern "C" __global__ void histogram(const unsigned* words, unsigned* hist, int n) {
  __shared__ unsigned local[64];
  for (int b = threadIdx.x; b < 64; b += blockDim.x) local[b] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    atomicAdd(&local[words[i] & 63], 1u);
  __syncthreads();
  for (int b = threadIdx.x; b < 64; b += blockDim.x) atomicAdd(&hist[b], local[b]);
}

// one m16n8k16 bf16 tile per warp: ldmatrix and mma.sync through inline PTX
extern "C" __global__ void mma_tile(const unsigned short* a, const unsigned short* b, float* c) {
  __shared__ __align__(16) unsigned short sa[16 * 16];
  __shared__ __align__(16) unsigned short sb[8 * 16];  // B^T: 8 rows (n) of 16 (k)
  int lane = threadIdx.x;
  for (int k = lane; k < 256; k += 32) sa[k] = a[k];
  for (int k = lane; k < 128; k += 32) sb[k] = b[(k % 16) * 8 + k / 16];
  __syncwarp();
  unsigned a0, a1, a2, a3, b0, b1;
  unsigned pa = (unsigned)__cvta_generic_to_shared(&sa[(lane % 16) * 16 + (lane / 16) * 8]);
  unsigned pb = (unsigned)__cvta_generic_to_shared(&sb[(lane % 8) * 16 + ((lane / 8) % 2) * 8]);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(a0), "=r"(a1), "=r"(a2), "=r"(a3) : "r"(pa));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
               : "=r"(b0), "=r"(b1) : "r"(pb));
  float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
               "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
               : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  int g = lane >> 2, q = lane & 3;
  c[g * 8 + 2 * q] = d0;
  c[g * 8 + 2 * q + 1] = d1;
  c[(g + 8) * 8 + 2 * q] = d2;
  c[(g + 8) * 8 + 2 * q + 1] = d3;
}

// a per-thread array indexed at run time lives in .local memory
extern "C" __global__ void local_sort(const int* in, int* out, int n) {
  int v[8];
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n) return;
  for (int i = 0; i < 8; ++i) v[i] = in[t * 8 + ((i * 5 + t) & 7)];
  int k = in[t * 8] & 7;
  v[k] += 1000;
  for (int i = 0; i < 8; ++i)
    for (int j = i + 1; j < 8; ++j)
      if (v[j] < v[i]) { int s = v[i]; v[i] = v[j]; v[j] = s; }
  for (int i = 0; i < 8; ++i) out[t * 8 + i] = v[i];
}

// bytes: a mask of chars selects elements (ld.u8, st.u8)
extern "C" __global__ void byte_mask(const unsigned char* keep, const float* x, float* y,
                                     unsigned char* flags, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    y[i] = keep[i] ? x[i] : 0.0f;
    flags[i] = (unsigned char)(x[i] > 0.0f) | (unsigned char)(keep[i] << 1);
  }
}

// a wmma 16x16x16 tile through the builtins nvcuda::wmma wraps (mma.h needs CCCL)
extern "C" __global__ void wmma_tile(const int* a, const int* b, float* c, float alpha) {
  int fa[8], fb[8];
  float fc[8], fd[8];
  for (int i = 0; i < 8; ++i) fc[i] = 0.0f;
  __hmma_m16n16k16_ld_a(fa, a, 16, 0);                // A row-major, 16 halves a row
  __hmma_m16n16k16_ld_b(fb, b, 16, 1);                // B column-major
  __hmma_m16n16k16_mma_f32f32(fd, fa, fb, fc, 1, 0);  // a row, b col
  for (int i = 0; i < 8; ++i) fd[i] *= alpha;         // the same on every element
  __hmma_m16n16k16_st_c_f32(c, fd, 16, 0);            // C row-major
}

// texture objects: tex2D, tex1Dfetch, tex1D of four channels and tex3D (tex.{1d,2d,3d})
extern "C" __global__ void tex_sample2d(cudaTextureObject_t t, float* out, int w, float dx,
                                        float dy) {
  int x = threadIdx.x, y = blockIdx.x;
  out[y * w + x] = tex2D<float>(t, x + dx, y + dy);
}
extern "C" __global__ void tex_fetch_ints(cudaTextureObject_t t, int* out, int shift) {
  out[threadIdx.x] = tex1Dfetch<int>(t, static_cast<int>(threadIdx.x) + shift);
}
extern "C" __global__ void tex_channels(cudaTextureObject_t t, float4* out, float step) {
  out[threadIdx.x] = tex1D<float4>(t, threadIdx.x * step);
}
extern "C" __global__ void tex_sample3d(cudaTextureObject_t t, float* out, float y, float z) {
  out[threadIdx.x] = tex3D<float>(t, threadIdx.x * 0.25f, y, z);
}

// the device heap: each thread's block from malloc, filled, summed and given back; a
// second kernel frees blocks a first one kept (pointers in global memory)
extern "C" __global__ void heap_sum(const int* sizes, int* sums) {
  int t = threadIdx.x, n = sizes[t];
  int* block = static_cast<int*>(malloc(n * sizeof(int)));
  if (block == nullptr) { sums[t] = -1; return; }
  for (int i = 0; i < n; ++i) block[i] = t + i;
  int s = 0;
  for (int i = 0; i < n; ++i) s += block[i];
  sums[t] = s;
  free(block);
}
extern "C" __global__ void heap_keep(int** kept, int n, int poke) {
  int* block = static_cast<int*>(malloc(n * sizeof(int)));
  block[poke] = threadIdx.x;  // poke >= n: a write past the block
  kept[threadIdx.x] = block;
}
extern "C" __global__ void heap_release(int** kept, int* out, int mistake) {
  int* block = kept[threadIdx.x];
  out[threadIdx.x] = block[0];
  free(block);
  if (mistake == 1) free(block);                      // a double free
  if (mistake == 2) out[threadIdx.x] += block[0];     // a read after the free
}

// surface objects: raw loads and stores (suld.b, sust.b), x a byte offset, in the three
// out-of-range modes
extern "C" __global__ void surf_invert(cudaSurfaceObject_t in, cudaSurfaceObject_t out) {
  int x = threadIdx.x, y = blockIdx.x;
  float v;
  surf2Dread(&v, in, x * 4, y);
  surf2Dwrite(1.0f - v, out, x * 4, y);
}
extern "C" __global__ void surf_bytes(cudaSurfaceObject_t s) {
  uchar4 c = surf1Dread<uchar4>(s, threadIdx.x * 4, cudaBoundaryModeClamp);
  c.x += 1;
  surf1Dwrite(c, s, threadIdx.x * 4, cudaBoundaryModeZero);
}
extern "C" __global__ void surf_volume(cudaSurfaceObject_t s, int x_step) {
  int v = surf3Dread<int>(s, threadIdx.x * x_step, 1, 2, cudaBoundaryModeTrap);
  surf3Dwrite(v + 1, s, threadIdx.x * x_step, 1, 2);
}
