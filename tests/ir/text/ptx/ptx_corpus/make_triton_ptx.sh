#!/bin/sh
# Regenerates Triton's sm_90a PTX: the matmul (cp.async + wgmma, 64x64x32 tiles, 4 warps,
# 3 stages, f32 C) offline with benchmarks/triton_compile.py in an environment that has
# Triton (3.9.0 made the committed files; benchmarks/setup_triton_env.sh creates one).
set -e
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../../../.." && pwd)"
PYTHON=${PYTHON:-$repo/benchmarks/.env-triton/bin/python}
"$PYTHON" "$repo/benchmarks/triton_compile.py" --json --reps 1 --bm 64 --bn 64 --bk 32 \
    --stages 3 --warps 4 --out f32 --emit-ptx "$here/triton_matmul_sm90a.ptx" > /dev/null
# debug info names the source file: keep the path relative to the repository
sed -i -e "s|$repo/||g" -e "s|\"[^\"]*/site-packages/|\"site-packages/|g" "$here/triton_matmul_sm90a.ptx"
# tutorial-style kernels (softmax, layer norm, f16 arithmetic, an fp8 cast) in one module
"$PYTHON" "$here/triton_kernels.py" "$here/triton_kernels_sm90a.ptx"
# flash-attention forward: through pointers (causal), TMA descriptors, warp-specialised
"$PYTHON" "$here/triton_attention.py" "$here/triton_attention_sm90a.ptx"
# matrix products: TMA, persistent, fp8, tf32, split-K with vector atomics
"$PYTHON" "$here/triton_gemms.py" "$here/triton_gemms_sm90a.ptx"
