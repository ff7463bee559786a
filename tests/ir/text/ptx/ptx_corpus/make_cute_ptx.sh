#!/bin/sh
# Regenerates cute_gemm_sm90a.ptx from cute_gemm.cu with the nvcc of the nvidia-cuda-nvcc
# wheel (CUDA 13.5, needs a host g++), CUTLASS's headers (CUTLASS_INCLUDE: the include/
# directory of a CUTLASS checkout; the committed PTX was made with CUTLASS 7107b05) and
# CCCL's (the wheel's include/cccl unless CCCL_INCLUDE names others). The .ptx file is
# committed, so tests need neither nvcc nor CUTLASS.
set -e
cd "$(dirname "$0")"
NVCC=${NVCC:-$(ls -d ../../../../../.venv/lib/python3*/site-packages/nvidia/cu13/bin)/nvcc}
CCCL=${CCCL_INCLUDE:-$(dirname "$NVCC")/../include/cccl}
"$NVCC" -ptx -arch=sm_90a -O3 -std=c++17 --expt-relaxed-constexpr \
    -I"${CUTLASS_INCLUDE:?set CUTLASS_INCLUDE to the include directory of CUTLASS}" \
    -I"$CCCL" cute_gemm.cu -o cute_gemm_sm90a.ptx
