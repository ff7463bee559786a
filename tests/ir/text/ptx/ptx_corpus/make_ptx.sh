#!/bin/sh
# Regenerates the PTX of this corpus with the nvcc of the nvidia-cuda-nvcc wheel
# (CUDA 13.5, needs a host g++; the half-precision and fp8 headers of kernels_sm90.cu
# include CCCL's <nv/target>, and libraries.cu CUB, which the wheel lacks: CCCL_INCLUDE
# names a CUDA toolkit's include/cccl, or that of the nvidia-cuda-cccl wheel). The .ptx
# files are committed, so tests need no nvcc.
set -e
cd "$(dirname "$0")"
NVCC=${NVCC:-$(ls -d ../../../../../.venv/lib/python3*/site-packages/nvidia/cu13/bin)/nvcc}
"$NVCC" -ptx -arch=sm_80 -O3 kernels.cu -o kernels_sm80.ptx
"$NVCC" -ptx -arch=sm_90 -O3 -I"${CCCL_INCLUDE:-/usr/local/cuda/include/cccl}" \
    kernels_sm90.cu -o kernels_sm90.ptx
"$NVCC" -ptx -arch=sm_80 -O3 -I"${CCCL_INCLUDE:-/usr/local/cuda/include/cccl}" \
    libraries.cu -o libraries_sm80.ptx
