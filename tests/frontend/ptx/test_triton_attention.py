"""Triton's flash-attention forward kernels for sm_90a (tests/ir/text/ptx/ptx_corpus/
triton_attention.py made the PTX), run on the CPU by ``ts.ptx`` against NumPy in
float64: through pointers with causal masking, through TMA descriptors, and
warp-specialised (a producer partition, consumer warpgroups, mbarrier rings that wrap);
and planted bugs in copies of the warp-specialised one, each reported at its line.
The launches are those the comments in the PTX give (Triton's metadata)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.interp.target import TargetFault
from tests.frontend.ptx.corpus import CORPUS, descriptors, line_of, scratch, triton_launch

PTX = CORPUS / "triton_attention_sm90a.ptx"
TEXT = PTX.read_text()
BF16 = ml_dtypes.bfloat16
BH, S, D = 2, 256, 64  # four key blocks of 64: every ring of three stages wraps
rng = np.random.default_rng(53)
Q, K, V = (rng.standard_normal((BH * S, D)).astype(BF16) for _ in range(3))
SCALE = np.float32(D ** -0.5)


def run(name: str, text: str | None = None, box: tuple[int, int] | None = None,
        shared: int | None = None) -> np.ndarray:
    """O of kernel ``name`` over Q, K, V (batch x heads flattened into rows)."""
    threads, dynamic, maps = triton_launch(TEXT, name)
    out = np.zeros((BH * S, D), BF16)
    args = descriptors([Q, K, V, out], maps, box) if maps else [Q, K, V, out]
    kernel = ts.ptx.load(text or PTX).kernel(name)
    kernel.run(grid=(S // 64, BH), block=threads, shared_bytes=shared or dynamic,
               args=[*args, np.int32(S), SCALE, *scratch()])
    return out


def reference(causal: bool) -> np.ndarray:
    q, k, v = (x.astype(np.float64).reshape(BH, S, D) for x in (Q, K, V))
    s = q @ k.transpose(0, 2, 1) * float(SCALE)
    if causal:
        s = np.where(np.tril(np.ones((S, S), bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True) @ v).reshape(BH * S, D)


@pytest.fixture(scope="module")
def outputs() -> dict[str, np.ndarray]:
    return {name: run(name) for name in ("attn_fwd_causal", "attn_fwd_tma", "attn_fwd_ws")}


@pytest.mark.parametrize("name", ["attn_fwd_causal", "attn_fwd_tma", "attn_fwd_ws"])
def test_attention_against_float64(outputs: dict[str, np.ndarray], name: str) -> None:
    """The kernels round P to bf16 before ``P V`` (half an ulp, 2^-9 of each weight;
    the weights sum to one) and O to bf16 (2^-9 of |O| <= max|V|); ``ex2.approx`` adds
    about 2^-22: within 2^-8 max|V| of the float64 attention."""
    err = np.abs(outputs[name].astype(np.float64) - reference(name == "attn_fwd_causal"))
    assert err.max() <= 2.0 ** -8 * np.abs(V.astype(np.float64)).max()


def test_warp_specialised_gives_the_plain_kernels_bits(outputs: dict[str, np.ndarray]) -> None:
    """The same arithmetic in another schedule: the producer partition, the rings and the
    consumers' order of arrival change no bit."""
    np.testing.assert_array_equal(outputs["attn_fwd_ws"].view(np.uint16),
                                  outputs["attn_fwd_tma"].view(np.uint16))


def _planted(old: str, new: str) -> tuple[str, int]:
    """The text with the first ``old`` of the warp-specialised kernel replaced by
    ``new``, and the line of the replacement."""
    start = TEXT.index(".visible .entry attn_fwd_ws")
    at = TEXT.index(old, start)
    line = TEXT.count("\n", 0, at) + 1
    return TEXT[:at] + new + TEXT[at + len(old):], line


def _fault(text: str, **kw: object) -> tuple[TargetFault, str]:
    with pytest.raises(TargetFault) as err:
        run("attn_fwd_ws", text, **kw)  # type: ignore[arg-type]
    line = text.splitlines()[err.value.loc.line - 1].strip()
    return err.value, line


def test_a_missing_release_of_a_stage_hangs_the_producer() -> None:
    """A consumer warpgroup that never releases its K/V stage (one thread arrives 128
    times on the empty barrier): the producer's wait for that stage never completes."""
    text, _ = _planted("@%p6 mbarrier.arrive.shared::cta.b64 _, [%r63], 128;", "")
    err, line = _fault(text)
    assert "phase never completes" in str(err) and "128 of 128 arrivals missing" in str(err)
    assert line.startswith("mbarrier.try_wait.parity")


def test_too_few_arrivals_on_a_stage() -> None:
    text, _ = _planted("[%r63], 128;", "[%r63], 64;")
    err, _ = _fault(text)
    assert "64 of 128 arrivals missing" in str(err)


def test_an_expect_tx_below_the_loads_bytes() -> None:
    text, _ = _planted("_, [%r711], 8192;", "_, [%r711], 4096;")
    err, line = _fault(text)
    assert "announced 4096 tx bytes but its TMA loads bring 8192" in str(err)
    assert line.startswith("mbarrier.try_wait.parity")


def test_a_tensor_map_with_another_box_than_the_kernel_expects() -> None:
    """Triton's metadata says 64x64 boxes; a 32x64 map brings half the bytes the
    producer announces, and the consumer's wait names the shortfall."""
    err, line = _fault(TEXT, box=(32, 64))
    assert "expected 8192 tx bytes, got 4096" in str(err)
    assert line.startswith("mbarrier.try_wait.parity")


def test_a_missing_proxy_fence_before_the_tma_store() -> None:
    text, at = _planted("fence.proxy.async.shared::cta;", "")
    err, line = _fault(text)
    assert "missing proxy fence" in str(err) and "cp.async.bulk.tensor.2d.global" in line
    assert err.loc.line == line_of(text, "cp.async.bulk.tensor.2d.global", at)


def test_less_shared_memory_than_triton_asks_for() -> None:
    """The mbarriers sit above the ring, past 64 KiB: the first init is out of bounds."""
    err, line = _fault(TEXT, shared=65536)
    assert "out of bounds" in str(err) and "65536 bytes of shared memory" in str(err)
    assert "mbarrier.init" in line
