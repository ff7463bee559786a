#!/usr/bin/env bash
# Create benchmarks/.env-triton: a virtual environment with Triton and a CPU build of
# PyTorch, for the Triton-interpreter column of benchmarks/tile_kernels.py
# (TRITON_INTERPRET=1 needs torch tensors as kernel arguments; no GPU is used).
#
# The environment is git-ignored and never committed. Before installing anything the
# script asks pip what it would fetch (`pip install --dry-run --report`) and refuses a
# plan that contains a CUDA build of torch or any nvidia-* package: those are several
# GiB and useless here. Override the torch requirement with TORCH_SPEC (default
# torch==2.13.0, which pip resolves to a local CPU wheel on the project's machines).
#
#   bash benchmarks/setup_triton_env.sh            # create or update the environment
#   PYTHON=python3.11 bash benchmarks/setup_triton_env.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
env_dir="${TRITON_ENV:-$here/.env-triton}"
python="${PYTHON:-python3}"
torch_spec="${TORCH_SPEC:-torch==2.13.0}"
packages=(triton "$torch_spec" numpy)

if [[ ! -x "$env_dir/bin/python" ]]; then
    echo "creating $env_dir with $("$python" --version 2>&1)"
    "$python" -m venv "$env_dir"
fi
pip=("$env_dir/bin/python" -m pip)

report="$(mktemp)"
trap 'rm -f "$report"' EXIT
echo "asking pip what it would install: ${packages[*]}"
"${pip[@]}" install --quiet --dry-run --report "$report" "${packages[@]}" 2>/dev/null

"$env_dir/bin/python" - "$report" <<'PY'
import json
import sys

plan = json.load(open(sys.argv[1]))["install"]
bad = []
for item in plan:
    name = item["metadata"]["name"].lower()
    version = item["metadata"]["version"]
    url = item["download_info"]["url"]
    where = "local" if url.startswith("file:") else "download"
    print(f"  {name} {version} ({where})")
    if name.startswith("nvidia-"):
        bad.append(f"{name} {version}")
    if name == "torch" and "+cpu" not in version and "file:" not in url:
        bad.append(f"torch {version} (not a CPU build)")
if bad:
    sys.exit("refusing to install GPU packages: " + ", ".join(bad) +
             "\nset TORCH_SPEC to a CPU torch (for example torch==2.13.0+cpu)")
PY

# (the local package mirrors configured here list some names they do not hold; pip
# warns about each: drop those lines)
"${pip[@]}" install --quiet "${packages[@]}" 2> >(grep -v "is ignored: it is neither" >&2)
"$env_dir/bin/python" -c "import torch, triton; print('triton', triton.__version__, '/ torch', \
torch.__version__, '(cuda:', torch.cuda.is_available(), ')')"
echo "ready: $env_dir"
