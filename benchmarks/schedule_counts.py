"""Kernels per program and compile times: Tessera's scheduler against tinygrad,
``torch.compile`` (Inductor, CPU) and JAX (XLA, CPU), in one run.

The programs (``compilers/common.py``, float32, small shapes): attention 3-D and 4-D,
causal attention with a ``where`` mask and with an additive mask, the MLP
``gelu(x@W1+b1)@W2+b2``, layernorm, a row softmax, six elementwise ops and a pre-norm
transformer block; each is written once per framework, after the same definitions.

* Tessera runs in this process (``compilers/tessera_side.py``): generated tile kernels
  where Schedule → Tile generation accepts the program, else the Schedule IR kernels
  (the row names the op generation refuses); compile time from the Python function to
  Schedule IR, Tile IR and, where ``CompiledProgram.ptx`` exists, PTX.
* Each other compiler runs in its own environment (``setup_compiler_envs.sh`` makes
  ``benchmarks/.env-tinygrad``, ``.env-inductor``, ``.env-jax``; none is a dependency of
  Tessera), one subprocess per program printing JSON (``compilers/*_counts.py``). A
  compiler whose environment is missing or fails is reported and the others go on.
* Last, the programs that generate today run as generated kernels in the tile simulator
  (``backend="tile"``, checked and fast) against the graph interpreter
  (``backend="interp"``), in the same run.

BLAS is pinned to one thread before NumPy is imported. Prints Markdown tables.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/schedule_counts.py
    .venv/bin/python benchmarks/schedule_counts.py --setup       # make missing envs first
    .venv/bin/python benchmarks/schedule_counts.py --compilers none --repeats 3
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from compilers import tessera_side  # noqa: E402
from compilers.common import PROGRAMS, TITLES  # noqa: E402

COMPILERS = {"tinygrad": "tinygrad", "inductor": "Inductor", "jax": "XLA"}
NA = "—"


def run_compiler(name: str, programs: list[str], timeout: float,
                 setup: bool) -> tuple[str | None, dict[str, dict[str, Any]]]:
    """Each program through ``compilers/NAME_counts.py`` in ``.env-NAME``: the
    compiler's version (None where it did not run) and a row per program (``error``
    where that program failed)."""
    python = HERE / f".env-{name}" / "bin" / "python"
    if not python.exists() and setup:
        proc = subprocess.run(["bash", str(HERE / "setup_compiler_envs.sh"), name],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            lines = (proc.stdout + proc.stderr).strip().splitlines()
            return None, {"*": {"error": "setup failed: " + (lines[-1] if lines else "")}}
    if not python.exists():
        return None, {"*": {"error": f"no environment at {python.parent.parent.name} "
                                     "(make it with benchmarks/setup_compiler_envs.sh)"}}
    script = HERE / "compilers" / f"{name}_counts.py"
    rows: dict[str, dict[str, Any]] = {}
    version = None
    with tempfile.TemporaryDirectory(prefix=f"{name}-cache-") as cache:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache)
        for program in programs:
            print(f"  {name}: {program}", file=sys.stderr, flush=True)
            rows[program] = child(python, script, program, env, timeout)
            version = rows[program].get("version", version)
    return version, rows


def child(python: Path, script: Path, program: str, env: dict[str, str],
          timeout: float) -> dict[str, Any]:
    """The JSON object a compiler's script printed for ``program``, or an error."""
    try:
        proc = subprocess.run([str(python), str(script), program], capture_output=True,
                              text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"ran past {timeout:.0f} s"}
    for line in reversed(proc.stdout.strip().splitlines()):
        if line.startswith("{"):
            return dict(json.loads(line))
    lines = proc.stderr.strip().splitlines()
    return {"error": f"exit {proc.returncode}: " + (lines[-1] if lines else "no output")}


def md(cells: list[str]) -> str:
    """One Markdown table row."""
    return "| " + " | ".join(cells) + " |"


def ms(seconds: float | None) -> str:
    if seconds is None:
        return NA
    return f"{seconds * 1e3:.0f}" if seconds >= 0.0995 else f"{seconds * 1e3:.1f}"


def title(name: str) -> str:
    return TITLES.get(name) or tessera_side.TESSERA_ONLY.get(name, name)


def tessera_cell(row: dict[str, Any]) -> str:
    if row["level"] == "tile":
        return f"{row['kernels']}"
    return f"{row['kernels']} (Schedule IR; {row['refused']} not generated)"


def other_cell(name: str, row: dict[str, Any] | None) -> str:
    """A compiler's kernels for one program, with what they are made of."""
    if row is None:
        return NA
    if "error" in row:
        return "failed"
    n = row["kernels"]
    if name == "inductor" and row["library"]:
        return f"{n} ({row['generated']} generated + {row['library']} library)"
    if name == "jax" and row["unfused"]:
        rest = " + ".join(f"{k} {op}" for op, k in row["unfused"].items())
        return f"{n} ({row['fusions']} fusions + {rest})"
    if name == "tinygrad" and row["ptx_kernels"] != n:
        return f"{n} ({row['ptx_kernels']} distinct, {row['mma']} with mma.sync)"
    if name == "tinygrad" and row["mma"]:
        return f"{n} ({row['mma']} with mma.sync)"
    return str(n)


def tables(tessera: list[dict[str, Any]], others: dict[str, tuple[str | None, dict]],
           sim: list[dict[str, Any]]) -> str:
    """The Markdown tables of one run."""
    names = [c for c in COMPILERS if c in others]
    out = ["### Kernels per program\n",
           md(["program", "Tessera", *(COMPILERS[c] for c in names)]),
           md(["---"] * (2 + len(names)))]
    for row in tessera:
        out.append(md([title(row["program"]), tessera_cell(row),
                       *(other_cell(c, others[c][1].get(row["program"])) for c in names)]))
    heads = {"tinygrad": "tinygrad → PTX sm_90", "inductor": "Inductor (CPU)",
             "jax": "XLA (CPU)"}
    out += ["", "### Compile time (ms)\n",
            md(["program", "Tessera → Schedule IR", "Tessera → Tile IR", "Tessera → PTX",
                *(heads[c] for c in names)]),
            md(["---", *["---:"] * (3 + len(names))])]
    for row in tessera:
        cells = []
        for c in names:
            r = others[c][1].get(row["program"])
            cells.append(NA if r is None else "failed" if "error" in r else ms(r["compile_s"]))
        ptx = "refused" if "ptx_error" in row else ms(row.get("ptx_s"))
        out.append(md([title(row["program"]), ms(row["schedule_s"]), ms(row.get("tile_s")),
                       ptx, *cells]))
    if sim:
        out += ["", "### Generated kernels in the tile simulator against the graph "
                "interpreter (ms)\n",
                "| program | kernels | interp exact | tile checked | checked / exact | "
                "bitwise | interp fast | tile fast | fast / fast |",
                "|---|---:|---:|---:|---:|---|---:|---:|---:|"]
        for r in sim:
            out.append(
                f"| {title(r['program'])} | {r['kernels']} | {ms(r['interp_exact_s'])} | "
                f"{ms(r['tile_exact_s'])} | {r['tile_exact_s'] / r['interp_exact_s']:.2f}× | "
                f"{'yes' if r['bitwise'] else 'NO'} | {ms(r['interp_fast_s'])} | "
                f"{ms(r['tile_fast_s'])} | {r['tile_fast_s'] / r['interp_fast_s']:.2f}× |")
    out += ["", notes(tessera, others)]
    return "\n".join(out)


def notes(tessera: list[dict[str, Any]], others: dict[str, tuple[str | None, dict]]) -> str:
    import numpy as np

    lines = [f"Tessera (this tree), Python {platform.python_version()}, NumPy "
             f"{np.__version__}, {platform.machine()}; PTX stage: "
             + ("`CompiledProgram.ptx()`" if tessera_side.has_ptx() else
                f"not in this version ({NA})")]
    for row in tessera:
        if "ptx_error" in row:
            lines.append(f"Tessera PTX of {row['program']}: {row['ptx_error']}")
    for name, (version, rows) in others.items():
        if "*" in rows:
            lines.append(f"{COMPILERS[name]}: skipped ({rows['*']['error']})")
            continue
        lines.append(f"{COMPILERS[name]}: {version}")
        for program, r in rows.items():
            if "error" in r:
                lines.append(f"{COMPILERS[name]} on {program}: {r['error']}")
            elif name == "inductor" and r["library_calls"]:
                lines.append(f"Inductor library calls in {program}: "
                             + ", ".join(f"`{c}`" for c in r["library_calls"]))
    return "\n".join(f"* {line}" for line in lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", default=",".join([*PROGRAMS, *tessera_side.TESSERA_ONLY]))
    parser.add_argument("--compilers", default=",".join(COMPILERS),
                        help="comma-separated, from tinygrad, inductor, jax; 'none' for none")
    parser.add_argument("--setup", action="store_true",
                        help="run setup_compiler_envs.sh for a missing environment first")
    parser.add_argument("--repeats", type=int, default=5, help="Tessera compiles per stage")
    parser.add_argument("--sim-repeats", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=600.0, help="per compiler process")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    args = parser.parse_args(argv)
    programs = [p for p in args.programs.split(",") if p]
    compilers = [c for c in args.compilers.split(",") if c in COMPILERS]

    tessera = tessera_side.count_rows(programs, args.repeats)
    others = {c: run_compiler(c, [p for p in programs if p in PROGRAMS], args.timeout,
                              args.setup) for c in compilers}
    generated = [r["program"] for r in tessera if r["level"] == "tile"]
    sim = tessera_side.simulator_rows(generated, args.sim_repeats)
    print(tables(tessera, others, sim))
    if args.json:
        args.json.write_text(json.dumps({"tessera": tessera, "simulator": sim,
                                         "compilers": others}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
