#!/usr/bin/env bash
# Create the environments of the graph-compiler columns of benchmarks/schedule_counts.py:
# one virtual environment per compiler, so that none of them is a dependency of Tessera
# and their own dependencies (torch, jaxlib) cannot meet:
#
#   benchmarks/.env-tinygrad   tinygrad (its scheduler and its PTX renderer; no GPU used)
#   benchmarks/.env-inductor   torch with torch.compile's Inductor, a CPU build
#   benchmarks/.env-jax        JAX and jaxlib (XLA on the CPU)
#
# The environments are git-ignored and never committed. Before installing anything the
# script asks pip what it would fetch (`pip install --dry-run --report`) and refuses a
# plan that contains a CUDA build of torch or any nvidia-* package. Versions are pinned
# (override with TINYGRAD_SPEC, TORCH_SPEC, JAX_SPEC). A compiler that fails to install
# is reported and the others are still made; the exit status counts the failures.
#
#   bash benchmarks/setup_compiler_envs.sh                 # all three
#   bash benchmarks/setup_compiler_envs.sh jax tinygrad    # some of them
#   PYTHON=python3.11 bash benchmarks/setup_compiler_envs.sh
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3}"
declare -A specs=(
    [tinygrad]="${TINYGRAD_SPEC:-tinygrad==0.14.0} numpy"
    [inductor]="${TORCH_SPEC:-torch==2.13.0} numpy"
    [jax]="${JAX_SPEC:-jax==0.10.2 jaxlib==0.10.2} numpy"
)
declare -A checks=(
    [tinygrad]="import tinygrad; from importlib.metadata import version; print('tinygrad', version('tinygrad'))"
    [inductor]="import torch; print('torch', torch.__version__, '(cuda:', torch.cuda.is_available(), ')')"
    [jax]="import jax, jaxlib; print('jax', jax.__version__, '/ jaxlib', jaxlib.__version__, jax.devices())"
)
names=("$@")
[[ ${#names[@]} -eq 0 ]] && names=(tinygrad inductor jax)

setup_one() {
    local name="$1" env_dir="$here/.env-$1" report
    read -r -a packages <<< "${specs[$name]}"
    if [[ ! -x "$env_dir/bin/python" ]]; then
        echo "creating $env_dir with $("$python" --version 2>&1)"
        "$python" -m venv "$env_dir" || return 1
    fi
    local pip=("$env_dir/bin/python" -m pip)
    report="$(mktemp)"
    echo "asking pip what it would install for $name: ${packages[*]}"
    "${pip[@]}" install --quiet --dry-run --report "$report" "${packages[@]}" 2>/dev/null \
        || { echo "pip cannot resolve ${packages[*]}"; rm -f "$report"; return 1; }
    "$env_dir/bin/python" - "$report" <<'PY' || { rm -f "$report"; return 1; }
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
    rm -f "$report"
    # (the local package mirrors configured here list some names they do not hold; pip
    # warns about each: drop those lines)
    "${pip[@]}" install --quiet "${packages[@]}" 2> >(grep -v "is ignored: it is neither" >&2) \
        || return 1
    "$env_dir/bin/python" -c "${checks[$name]}" || return 1
    echo "ready: $env_dir"
}

failed=0
for name in "${names[@]}"; do
    if [[ -z "${specs[$name]+set}" ]]; then
        echo "unknown compiler $name (tinygrad, inductor, jax)" >&2
        failed=$((failed + 1))
        continue
    fi
    setup_one "$name" || { echo "FAILED: $name" >&2; failed=$((failed + 1)); }
done
exit "$failed"
