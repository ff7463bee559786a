"""Third-party PTX with one line changed: the reader answers with its own errors only,
every module it accepts assembles with ptxas, and none it calls a syntax error does.
The kernels are the nvcc corpus (sm_80; and sm_90: half precision, fp8 pairs,
device-function calls, printf), Triton's (sm_90a: a matmul and tutorial kernels) and
tessera's own GEMM for both targets (TMA, mbarrier, wgmma; cp.async, ldmatrix,
mma.sync); a drawn line gets a new type, an inserted or dropped modifier, a dropped or
added operand, or another register, literal or special register in place of an
operand: the mistakes a person editing PTX by hand makes."""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tessera.backend.ptx.driver import ToolchainMissing, find_ptxas
from tessera.errors import TesseraError
from tessera.frontend.kernel.backends.compile import compile_kernel
from tessera.ir.text.ptx import PtxUnsupportedError, parse_ptx

CORPUS = Path(__file__).parent / "ptx_corpus"
ROOT = Path(__file__).resolve().parents[4]


def tessera_gemms() -> dict[str, str]:
    """Tessera's own PTX for the example GEMM: the sm_90a warp-specialised pipeline
    (TMA, mbarrier, wgmma) and the sm_80 cp.async/ldmatrix/mma.sync ring."""
    spec = importlib.util.spec_from_file_location("_mutated_gemm",
                                                  ROOT / "examples" / "kernels" / "gemm.py")
    assert spec and spec.loader
    gemm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gemm)
    a, b = np.zeros((128, 64), ml_dtypes.bfloat16), np.zeros((64, 128), ml_dtypes.bfloat16)
    c = np.zeros((128, 128), np.float32)
    return {f"gemm_{t}.ptx": compile_kernel(gemm.gemm, a, b, c, target=t, tile_shape=tile).ptx
            for t, tile in (("sm_90a", (128, 128, 64)), ("sm_80", (64, 64, 32)))}


TEXTS = {p.name: p.read_text() for p in sorted(CORPUS.glob("*.ptx"))} | tessera_gemms()
INSTRUCTION = re.compile(r"(\s+(?:@!?%\w+\s+)?)([a-z]\S*)(\s*)(.*);\s*$")
TYPES = ["b16", "b32", "b64", "u16", "u32", "u64", "s16", "s32", "s64", "f16", "f16x2",
         "bf16", "bf16x2", "f32", "f64", "pred", "u8", "s8"]
MODIFIERS = ["rn", "rz", "approx", "ftz", "sat", "lo", "hi", "wide", "global", "shared",
             "const", "local", "param", "v2", "v4", "sync", "aligned", "acquire", "release",
             "gpu", "cta", "relaxed", "x2", "x4", "trans", "cg", "ca", "nc", "uni", "bfly",
             "volatile", "shared::cta", "L1::no_allocate", "weak", "sys", "cluster", "acq_rel",
             "mmio", "L2::cache_hint", "L2::128B", "L1::evict_last"]
OPERANDS = ["%r1", "%rd1", "%f1", "%p1", "7", "-1", "0f3F800000", "[%rd1+8]", "%tid.x",
            "%laneid"]


ENTRY = re.compile(r"^(?:\.visible\s+|\.weak\s+)?\.entry\s")


def one_kernel(lines: list[str], keep: int, alone: bool = False) -> tuple[list[str], int]:
    """The module without its kernels other than the one holding line ``keep``, and
    that line's new index. Where the line lies in a device function: the whole module
    (the reader reads the function in each kernel that calls it), or with ``alone``
    the module without any kernel (the reader reads it alone, as no kernel calls it).
    A kernel calls no kernel, so the rest still assembles, and ptxas takes seconds over
    the thirty-odd kernels of a module such as CUB's."""
    out: list[str] = []
    at = outside = None
    i = 0
    while i < len(lines):
        if not ENTRY.match(lines[i]):
            outside = len(out) if i == keep else outside
            out.append(lines[i])
            i += 1
            continue
        depth, j, opened = 0, i, False
        while not (opened and depth == 0):  # to the brace that closes the kernel
            code = lines[j].split("//")[0]
            depth += code.count("{") - code.count("}")
            opened |= "{" in code
            j += 1
        if i <= keep < j:
            at = keep - i + len(out)
            out += lines[i:j]
        i = j
    if at is not None:
        return out, at
    return (out, outside) if alone and outside is not None else (lines, keep)


def lines_of(name: str) -> list[int]:
    return [i for i, line in enumerate(TEXTS[name].split("\n")) if INSTRUCTION.match(line)
            and not line.strip().startswith(".")]


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, str, str]:
    """(file name, changed line, whole module)."""
    name = draw(st.sampled_from(sorted(TEXTS)))
    lines, i = one_kernel(TEXTS[name].split("\n"), draw(st.sampled_from(lines_of(name))),
                          alone=draw(st.booleans()))
    m = INSTRUCTION.match(lines[i])
    assert m is not None
    pre, opcode, space, rest = m.groups()
    parts = opcode.split(".")
    ops = re.split(r",\s*(?![^{]*})", rest) if rest else []
    kind = draw(st.integers(0, 5))
    if kind == 0 and len(parts) > 1:
        parts[-1] = draw(st.sampled_from(TYPES))
    elif kind == 1:
        parts.insert(draw(st.integers(1, len(parts))), draw(st.sampled_from(MODIFIERS)))
    elif kind == 2 and len(parts) > 1:
        del parts[draw(st.integers(1, len(parts) - 1))]
    elif kind == 3 and ops:
        del ops[draw(st.integers(0, len(ops) - 1))]
    elif kind == 4:
        ops.append(draw(st.sampled_from(OPERANDS[:4])))
    elif ops:
        ops[draw(st.integers(0, len(ops) - 1))] = draw(st.sampled_from(OPERANDS))
    lines[i] = f"{pre}{'.'.join(parts)}{space}{', '.join(ops)};"
    return name, lines[i].strip(), "\n".join(lines)


@pytest.fixture(scope="module")
def ptxas() -> str:
    try:
        return find_ptxas()
    except ToolchainMissing as err:
        pytest.skip(f"no ptxas here: {err}")


def test_one_kernel_keeps_the_module_around_it() -> None:
    text = TEXTS["kernels_sm90.ptx"].split("\n")
    i = next(k for k, line in enumerate(text) if "bf162_ops" in line) + 5
    kept, at = one_kernel(text, i)
    assert kept[at] == text[i] and sum(bool(ENTRY.match(x)) for x in kept) == 1
    assert sum(x.startswith(".func") for x in kept) == sum(x.startswith(".func") for x in text)
    in_function = next(k for k, line in enumerate(text) if "ld.param" in line)
    assert one_kernel(text, in_function) == (text, in_function)
    alone, at = one_kernel(text, in_function, alone=True)  # every function, no kernel
    assert alone[at] == text[in_function] and not any(ENTRY.match(x) for x in alone)
    assert sum(x.startswith(".func") for x in alone) == sum(x.startswith(".func") for x in text)


@settings(max_examples=250, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=mutated())
def test_the_reader_and_ptxas_agree(case: tuple[str, str, str], ptxas: str,
                                    tmp_path_factory: pytest.TempPathFactory) -> None:
    """What the reader accepts assembles; what it calls a syntax error does not (it may
    call a valid instruction it does not model unsupported)."""
    name, line, text = case
    try:
        parse_ptx(text, name)
        refused = None
    except PtxUnsupportedError:
        return
    except TesseraError as err:  # refused with a located error of its own
        refused = err
    where = tmp_path_factory.mktemp("mutated")
    (where / "k.ptx").write_text(text)
    target = re.search(r"^\.target\s+(sm_\w+)", text, re.M)
    arch = target.group(1) if target else "sm_80"
    run = subprocess.run([ptxas, f"-arch={arch}", "k.ptx", "-o", "k.cubin"], cwd=where,
                         capture_output=True, text=True, check=False)
    if refused is None:
        assert run.returncode == 0, f"{name}: the reader accepted {line!r}:\n{run.stderr}"
    else:
        assert run.returncode != 0, f"{name}: ptxas accepts {line!r}, refused: {refused}"
