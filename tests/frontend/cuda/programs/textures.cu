// Texture objects over CUDA arrays, pitched and linear memory: point and linear
// filtering, clamp, border and wrap addressing, normalized reads of bytes, tex1Dfetch,
// a 3-D array filled by cudaMemcpy3D, a surface a kernel writes, and a texture a GPU
// refuses. The values filtered are small integers at quarter-texel weights, which every
// rounding order gives exactly.
#include <cstdio>

__global__ void sample2d(cudaTextureObject_t t, float* out, int w, float dx, float dy) {
  int x = threadIdx.x, y = blockIdx.x;
  out[y * w + x] = tex2D<float>(t, x + dx, y + dy);
}
__global__ void fetch_ints(cudaTextureObject_t t, int* out) {
  out[threadIdx.x] = tex1Dfetch<int>(t, static_cast<int>(threadIdx.x) - 2);
}
__global__ void wrap4(cudaTextureObject_t t, float4* out) {
  out[threadIdx.x] = tex1D<float4>(t, threadIdx.x * 0.25f);
}
__global__ void sample3d(cudaTextureObject_t t, float* out) {
  out[threadIdx.x] = tex3D<float>(t, threadIdx.x * 0.25f, 1.5f, 0.75f);
}

__global__ void paint(cudaSurfaceObject_t s) {
  int x = threadIdx.x, y = blockIdx.x;
  float left = -1.0f;
  surf2Dread(&left, s, (x - 1) * 4, y, cudaBoundaryModeZero);  // zero left of column 0
  surf2Dwrite(100.0f * y + x + left, s, x * 4, y);
}

cudaTextureObject_t make(const cudaResourceDesc& r, cudaTextureFilterMode filter,
                         cudaTextureAddressMode address, cudaTextureReadMode read,
                         int normalized) {
  cudaTextureDesc td = {};
  td.addressMode[0] = td.addressMode[1] = td.addressMode[2] = address;
  td.filterMode = filter;
  td.readMode = read;
  td.normalizedCoords = normalized;
  cudaTextureObject_t t = 0;
  cudaError_t e = cudaCreateTextureObject(&t, &r, &td, nullptr);
  if (e != cudaSuccess) std::printf("texture refused: %d\n", e == cudaErrorInvalidValue);
  return t;
}

void print(const char* what, const float* v, int n, const char* format) {
  std::printf("%s", what);
  for (int i = 0; i < n; ++i) std::printf(format, v[i]);
  std::printf("\n");
}

int main() {
  const int w = 8, h = 4;
  float image[h][w];
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) image[y][x] = static_cast<float>(10 * y + x);
  cudaChannelFormatDesc fdesc = cudaCreateChannelDesc<float>();
  cudaArray_t arr;
  cudaMallocArray(&arr, &fdesc, w, h);
  cudaMemcpy2DToArray(arr, 0, 0, image, w * sizeof(float), w * sizeof(float), h,
                      cudaMemcpyHostToDevice);
  cudaResourceDesc r = {};
  r.resType = cudaResourceTypeArray;
  r.res.array.array = arr;
  float* out;
  cudaMallocManaged(&out, 64 * sizeof(float));

  cudaTextureObject_t point = make(r, cudaFilterModePoint, cudaAddressModeBorder,
                                   cudaReadModeElementType, 0);
  sample2d<<<h, w>>>(point, out, w, 1.0f, -0.5f);  // one texel right, half a row up
  cudaDeviceSynchronize();
  print("point border", out, w * h, " %g");
  cudaTextureObject_t linear = make(r, cudaFilterModeLinear, cudaAddressModeClamp,
                                    cudaReadModeElementType, 0);
  sample2d<<<h, w>>>(linear, out, w, 0.75f, 1.0f);  // a quarter right, half a row down
  cudaDeviceSynchronize();
  print("linear clamp", out, w * h, " %g");

  // bytes in pitched memory, read as floats in [0, 1]
  unsigned char* bytes;
  size_t pitch;
  cudaMallocPitch(reinterpret_cast<void**>(&bytes), &pitch, w, h);
  unsigned char shades[h][w];
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) shades[y][x] = static_cast<unsigned char>(17 * (y * w + x));
  cudaMemcpy2D(bytes, pitch, shades, w, w, h, cudaMemcpyHostToDevice);
  cudaResourceDesc rp = {};
  rp.resType = cudaResourceTypePitch2D;
  rp.res.pitch2D.devPtr = bytes;
  rp.res.pitch2D.desc = cudaCreateChannelDesc<unsigned char>();
  rp.res.pitch2D.width = w;
  rp.res.pitch2D.height = h;
  rp.res.pitch2D.pitchInBytes = pitch;
  cudaTextureObject_t unit = make(rp, cudaFilterModePoint, cudaAddressModeClamp,
                                  cudaReadModeNormalizedFloat, 0);
  sample2d<<<h, w>>>(unit, out, w, 0.5f, 0.5f);
  cudaDeviceSynchronize();
  print("normalized bytes", out, 8, " %.5f");

  // linear memory of ints: tex1Dfetch reads zeros outside it
  int* ints;
  cudaMallocManaged(&ints, 16 * sizeof(int));
  for (int i = 0; i < 10; ++i) ints[i] = 3 * i;
  cudaResourceDesc rl = {};
  rl.resType = cudaResourceTypeLinear;
  rl.res.linear.devPtr = ints;
  rl.res.linear.desc = cudaCreateChannelDesc<int>();
  rl.res.linear.sizeInBytes = 10 * sizeof(int);
  cudaTextureObject_t fetch = make(rl, cudaFilterModePoint, cudaAddressModeClamp,
                                   cudaReadModeElementType, 0);
  int* got;
  cudaMallocManaged(&got, 16 * sizeof(int));
  fetch_ints<<<1, 14>>>(fetch, got);
  cudaDeviceSynchronize();
  std::printf("tex1Dfetch");
  for (int i = 0; i < 14; ++i) std::printf(" %d", got[i]);
  std::printf("\n");

  // four channels, normalized coordinates wrapping around
  float4 colours[4];
  for (int i = 0; i < 4; ++i) colours[i] = make_float4(i, 10 + i, 20 + i, 30 + i);
  cudaChannelFormatDesc d4 = cudaCreateChannelDesc<float4>();
  cudaArray_t arr4;
  cudaMallocArray(&arr4, &d4, 4, 0);
  cudaMemcpy2DToArray(arr4, 0, 0, colours, sizeof colours, sizeof colours, 1,
                      cudaMemcpyHostToDevice);
  cudaResourceDesc r4 = {};
  r4.resType = cudaResourceTypeArray;
  r4.res.array.array = arr4;
  cudaTextureObject_t wrap = make(r4, cudaFilterModePoint, cudaAddressModeWrap,
                                  cudaReadModeElementType, 1);
  float4* out4;
  cudaMallocManaged(&out4, 8 * sizeof(float4));
  wrap4<<<1, 8>>>(wrap, out4);
  cudaDeviceSynchronize();
  print("wrap float4", reinterpret_cast<float*>(out4), 32, " %g");

  // a 3-D array from pitched memory, filtered along all three axes
  float volume[2][3][4];
  for (int i = 0; i < 24; ++i) (&volume[0][0][0])[i] = static_cast<float>(i);
  cudaArray_t arr3;
  cudaMalloc3DArray(&arr3, &fdesc, make_cudaExtent(4, 3, 2));
  cudaMemcpy3DParms copy = {};
  copy.srcPtr = make_cudaPitchedPtr(volume, 4 * sizeof(float), 4, 3);
  copy.dstArray = arr3;
  copy.extent = make_cudaExtent(4, 3, 2);
  copy.kind = cudaMemcpyHostToDevice;
  cudaMemcpy3D(&copy);
  cudaResourceDesc r3 = {};
  r3.resType = cudaResourceTypeArray;
  r3.res.array.array = arr3;
  cudaTextureObject_t trilinear = make(r3, cudaFilterModeLinear, cudaAddressModeClamp,
                                       cudaReadModeElementType, 0);
  sample3d<<<1, 8>>>(trilinear, out);
  cudaDeviceSynchronize();
  print("trilinear", out, 8, " %g");

  // a surface over an array of zeros: each element 100 y + x plus the zero on its left
  // (outside the surface at column 0, which the zero mode reads as zero)
  cudaArray_t canvas;
  cudaMallocArray(&canvas, &fdesc, w, h, cudaArraySurfaceLoadStore);
  float zeros[h][w] = {};
  cudaMemcpy2DToArray(canvas, 0, 0, zeros, w * sizeof(float), w * sizeof(float), h,
                      cudaMemcpyHostToDevice);
  cudaResourceDesc rs = {};
  rs.resType = cudaResourceTypeArray;
  rs.res.array.array = canvas;
  cudaSurfaceObject_t surface;
  cudaCreateSurfaceObject(&surface, &rs);
  paint<<<h, w>>>(surface);
  cudaDeviceSynchronize();
  float painted[h][w];
  cudaMemcpy2DFromArray(painted, w * sizeof(float), canvas, 0, 0, w * sizeof(float), h,
                        cudaMemcpyDeviceToHost);
  print("surface", &painted[0][0], w * h, " %g");
  cudaDestroySurfaceObject(surface);
  cudaFreeArray(canvas);

  // linear filtering of ints read as ints: a GPU refuses the texture
  make(rl, cudaFilterModeLinear, cudaAddressModeClamp, cudaReadModeElementType, 0);
  cudaGetLastError();
  for (cudaTextureObject_t t : {point, linear, unit, fetch, wrap, trilinear})
    cudaDestroyTextureObject(t);
  cudaFreeArray(arr);
  cudaFreeArray(arr4);
  cudaFreeArray(arr3);
  std::printf("done\n");
  return 0;
}
