// Thread block clusters (sm_90): a kernel with __cluster_dims__ whose CTAs read their
// neighbour's shared memory (distributed shared memory, cooperative groups'
// map_shared_rank) between two cluster.sync(); a cudaLaunchKernelEx launch in clusters of
// four whose CTAs add into the first CTA's shared counter with atomics; and launches a GPU
// refuses (a grid that is not a whole number of clusters, a cluster of 16 CTAs).
#include <cooperative_groups.h>

#include <cstdio>

namespace cg = cooperative_groups;

__global__ void __cluster_dims__(2, 1, 1) swap_halves(const int* in, int* out) {
  __shared__ int part[64];
  cg::cluster_group cluster = cg::this_cluster();
  unsigned rank = cluster.block_rank();
  part[threadIdx.x] = in[blockIdx.x * 64 + threadIdx.x];
  cluster.sync();  // the other CTA's part is written
  const int* other = cluster.map_shared_rank(part, rank ^ 1);
  out[blockIdx.x * 64 + threadIdx.x] = 1000 * part[threadIdx.x] + other[63 - threadIdx.x];
  cluster.sync();  // no CTA exits while the other still reads its memory
}

__global__ void count_in_first(int* totals, unsigned* where) {
  __shared__ int counter;
  cg::cluster_group cluster = cg::this_cluster();
  if (threadIdx.x == 0) counter = 0;
  cluster.sync();
  int* first = cluster.map_shared_rank(&counter, 0);
  atomicAdd(first, static_cast<int>(cluster.block_rank() + 1));
  cluster.sync();
  if (threadIdx.x == 0) {
    dim3 at = cluster.block_index();
    where[blockIdx.x] = 100 * cluster.block_rank() + 10 * at.x + cluster.num_blocks();
    if (cluster.block_rank() == 0) totals[blockIdx.x / 4] = counter;
  }
  cluster.sync();
}

cudaError_t launch_in_clusters(unsigned grid, unsigned size, int* totals, unsigned* where) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(32);
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = size;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, count_in_first, totals, where);
}

int main() {
  int in[256], out[256], *d_in, *d_out;
  for (int i = 0; i < 256; ++i) in[i] = i;
  cudaMalloc(&d_in, sizeof in);
  cudaMalloc(&d_out, sizeof out);
  cudaMemcpy(d_in, in, sizeof in, cudaMemcpyHostToDevice);
  swap_halves<<<4, 64>>>(d_in, d_out);
  cudaMemcpy(out, d_out, sizeof out, cudaMemcpyDeviceToHost);
  std::printf("swap: %d %d %d %d\n", out[0], out[63], out[64], out[255]);

  int totals[2], *d_totals;
  unsigned where[8], *d_where;
  cudaMalloc(&d_totals, sizeof totals);
  cudaMalloc(&d_where, sizeof where);
  cudaError_t e = launch_in_clusters(8, 4, d_totals, d_where);
  cudaMemcpy(totals, d_totals, sizeof totals, cudaMemcpyDeviceToHost);
  cudaMemcpy(where, d_where, sizeof where, cudaMemcpyDeviceToHost);
  std::printf("clusters of 4: %s, totals %d %d, CTAs", cudaGetErrorName(e), totals[0],
              totals[1]);
  for (unsigned w : where) std::printf(" %u", w);
  std::printf("\n");
  std::printf("grid of 6: %s\n", cudaGetErrorName(launch_in_clusters(6, 4, d_totals, d_where)));
  cudaGetLastError();
  std::printf("clusters of 16: %s\n",
              cudaGetErrorName(launch_in_clusters(16, 16, d_totals, d_where)));
  cudaGetLastError();
  cudaFree(d_in);
  cudaFree(d_out);
  cudaFree(d_totals);
  cudaFree(d_where);
  return 0;
}
