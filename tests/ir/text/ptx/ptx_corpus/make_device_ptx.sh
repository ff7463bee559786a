#!/bin/sh
# Regenerates the PTX of CUB's device-wide algorithms (device_algorithms_sm80.ptx) and
# the launches CUB's host code makes for them (device_algorithms_launches.jsonl): the
# host program is linked with record_runtime.cpp, which prints each launch instead of
# running it. Needs what make_ptx.sh needs (nvcc, a host g++, CCCL_INCLUDE) and the
# repository's virtual environment (tessera reads each kernel's parameter sizes).
set -e
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../../../.." && pwd)"
NVCC=${NVCC:-$(ls -d "$repo"/.venv/lib/python3*/site-packages/nvidia/cu13/bin)/nvcc}
CCCL=${CCCL_INCLUDE:-/usr/local/cuda/include/cccl}
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$here"
"$NVCC" -ptx -arch=sm_80 -O3 -I"$CCCL" device_algorithms.cu -o device_algorithms_sm80.ptx
"$repo/.venv/bin/python" - device_algorithms_sm80.ptx > "$work/sizes.inc" <<'PY'
import sys
import tessera as ts
mod = ts.ptx.load(sys.argv[1])
print("static const std::vector<KernelSizes> kKernels = {")
for name in mod.kernels:
    sizes = ", ".join(str(p.size) for p in mod.kernel(name).params)
    print(f'  {{"{name}", {{{sizes}}}}},')
print("};")
PY
"$NVCC" -arch=sm_80 -O1 -cudart none -I"$CCCL" -I"$work" device_algorithms.cu \
    record_runtime.cpp -o "$work/record"
"$work/record" > device_algorithms_launches.jsonl
