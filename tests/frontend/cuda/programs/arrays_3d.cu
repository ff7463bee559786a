// 3-D copies between CUDA arrays and pitched memory in every pairing, with positions: a
// 2x2x1 corner of one array at (1, 1, 1) into another at (0, 0, 0). With `past` the
// corner's rows pass the edge of the source array.
#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  cudaChannelFormatDesc desc = cudaCreateChannelDesc<int>();
  cudaArray_t a, b;
  cudaMalloc3DArray(&a, &desc, make_cudaExtent(4, 3, 2));
  cudaMalloc3DArray(&b, &desc, make_cudaExtent(4, 3, 2));
  int host[2][3][4];
  for (int i = 0; i < 24; ++i) (&host[0][0][0])[i] = i;
  cudaMemcpy3DParms in = {};
  in.srcPtr = make_cudaPitchedPtr(host, 4 * sizeof(int), 4, 3);
  in.dstArray = a;
  in.extent = make_cudaExtent(4, 3, 2);
  in.kind = cudaMemcpyHostToDevice;
  cudaMemcpy3D(&in);
  cudaMemcpy3DParms corner = {};
  corner.srcArray = a;
  corner.srcPos = make_cudaPos(1, argc > 1 && !std::strcmp(argv[1], "past") ? 2 : 1, 1);
  corner.dstArray = b;
  corner.extent = make_cudaExtent(2, 2, 1);
  corner.kind = cudaMemcpyDeviceToDevice;
  cudaMemcpy3D(&corner);
  int out[2][3][4] = {};
  cudaMemcpy3DParms back = {};
  back.srcArray = b;
  back.dstPtr = make_cudaPitchedPtr(out, 4 * sizeof(int), 4, 3);
  back.extent = make_cudaExtent(4, 3, 2);
  back.kind = cudaMemcpyDeviceToHost;
  cudaMemcpy3D(&back);
  std::printf("corner %d %d %d %d, rest %d, %s\n", out[0][0][0], out[0][0][1], out[0][1][0],
              out[0][1][1], out[1][2][3], cudaGetErrorString(cudaGetLastError()));
  cudaFreeArray(a);
  cudaFreeArray(b);
  return 0;
}
