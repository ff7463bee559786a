"""``ts.jit(f).lower(*args)`` of a function placed on a mesh: the per-device kernels,
the per-device schedule with its collectives, and runs on every backend that lowers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tessera as ts
from tessera import dist, op
from tessera.errors import UnsupportedError
from tessera.ir import parse_module, print_module, verify_module
from tessera.ir.dialects import schedule as schedule_ops

MESH = dist.mesh(axes=("dp", "tp"), shape=(2, 4))
GOLDEN = Path(__file__).parents[2] / "golden" / "schedule_mesh"


def _place(rng: np.random.Generator, shape: tuple[int, ...], *pairs: tuple[str, str]
           ) -> ts.DistTensor:
    spec = dist.ShardSpec(tuple(p[0] for p in pairs), tuple(p[1] for p in pairs))
    return dist.from_numpy(rng.standard_normal(shape).astype(np.float32), mesh=MESH,
                           layout=spec)


def tp_mlp(x, w1, w2):  # type: ignore[no-untyped-def]
    return op.gelu(x @ w1) @ w2


def tp_args() -> tuple[ts.DistTensor, ...]:
    """The arguments the goldens were printed for (same seed, same layouts)."""
    rng = np.random.default_rng(0)
    return (_place(rng, (16, 8), ("row", "dp")), _place(rng, (8, 32), ("col", "tp")),
            _place(rng, (32, 8), ("row", "tp")))


def chain(x, y):  # type: ignore[no-untyped-def]
    return op.maximum(x * y + 1.0, x - y) * 0.5


@pytest.mark.parametrize(("mode", "golden"), [("exact", "tp_mlp"), ("fast", "tp_mlp_fast")])
def test_schedule_text_is_the_golden_after_a_comment_naming_the_devices(mode: str,
                                                                         golden: str) -> None:
    text = ts.jit(tp_mlp, mode=mode).lower(*tp_args()).ir("schedule")
    head, body = text.split("\n", 1)
    assert head == "// devices 0-7 (all 8) run this program"
    assert body == (GOLDEN / f"{golden}.tir").read_text()
    module = parse_module(text)  # the comment is part of the text form
    verify_module(module)
    assert print_module(module) == body


def test_kernels_and_repr_say_every_device_runs_the_same_kernels() -> None:
    lowered = ts.jit(tp_mlp).lower(*tp_args())
    assert [k.name for k in lowered.kernels] == ["tp_mlp_k0", "tp_mlp_k1"]
    assert "(the same kernels on every device)" in repr(lowered.kernels)
    assert repr(lowered) == ("<tessera lowered tp_mlp on mesh<dp=2, tp=4>: 2 kernel(s) and "
                             "2 collective(s) per device, the same on all 8 devices>")
    assert "tile.kernel @tp_mlp_k0" in lowered.kernels[0].text
    assert lowered.on_mesh and len(lowered.mesh.groups) == 1


def test_uneven_blocks_list_each_device_program() -> None:
    rng = np.random.default_rng(1)
    x, y = (_place(rng, (10, 13), ("row", "dp"), ("col", "tp")) for _ in range(2))
    lowered = ts.jit(chain).lower(x, y)
    assert "2 device programs" in repr(lowered)
    assert repr(lowered.kernels) == ("<kernels of 2 device program(s); devices 0, 4: "
                                     "chain_k0; devices 1, 2, 3, 5, 6, 7: chain_k0>")
    text = lowered.ir("schedule")
    assert "// devices 0, 4 run this program" in text
    assert "tensor<5x4xf32>" in text and "tensor<5x3xf32>" in text
    got = lowered.run(x, y, backend="tile")
    assert np.asarray(got).tobytes() == np.asarray(lowered.run(x, y)).tobytes()


def test_tile_stage_shows_each_segment_and_the_collectives_between() -> None:
    text = ts.jit(tp_mlp, mode="fast").lower(*tp_args()).ir("tile")
    assert text.index("host @tp_mlp") < text.index("// collective c0: graph.all_reduce")
    assert "launch @tp_mlp_k1" in text


def test_elementwise_kernels_run_lowered_to_target_ir() -> None:
    rng = np.random.default_rng(2)
    x, y = (_place(rng, (16, 32), ("row", "dp"), ("col", "tp")) for _ in range(2))
    lowered = ts.jit(chain).lower(x, y)
    want = lowered.run(x, y)
    got = lowered.run(x, y, backend="target")
    assert isinstance(got, ts.DistTensor) and got.mesh is MESH
    assert np.asarray(got).tobytes() == np.asarray(want).tobytes()
    assert "ptx.kernel @chain_k0(" in lowered.ir("target")
    assert np.asarray(ts.jit(chain, backend="target")(x, y)).tobytes() == \
        np.asarray(want).tobytes()


def test_matmul_kernels_on_target_give_the_bits_or_name_the_op() -> None:
    """Each device's matmul kernels either lower (and keep the interpreter's bits) or
    are refused naming the graph op, as on one device."""
    args = tp_args()
    want = ts.jit(tp_mlp)(*args)
    try:
        got = ts.jit(tp_mlp, backend="target")(*args)
    except UnsupportedError as err:
        assert "graph.matmul cannot be lowered for sm_90a" in str(err)
    else:
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes()


def test_backends_that_cannot_take_the_program_say_so() -> None:
    args = tp_args()
    with pytest.raises(UnsupportedError, match="runs one GPU") as err:
        ts.jit(tp_mlp, backend="cuda")(*args)
    assert "backend='tile'" in (err.value.hint or "")
    with pytest.raises(UnsupportedError, match="placed on a mesh"):
        _ = ts.jit(tp_mlp).lower(*args).tile


def test_inspect_ir_of_a_placed_function_is_the_per_device_schedule() -> None:
    text = ts.inspect_ir(tp_mlp, "schedule", *tp_args())
    fn = next(iter(parse_module(text).functions.values()))
    schedule_ops.check_function(fn, collectives=True)
    assert text.count("schedule.collective(") == 2


def test_plain_arrays_beside_dist_tensors_are_replicated() -> None:
    rng = np.random.default_rng(3)
    x = _place(rng, (16, 8), ("row", ("dp", "tp")))
    w = rng.standard_normal((8, 4)).astype(np.float32)
    f = ts.jit(lambda a, b: op.relu(a @ b), backend="tile")
    got = f(x, w)
    assert np.asarray(got).tobytes() == np.asarray(ts.jit(lambda a, b: op.relu(a @ b))(x, w)
                                                   ).tobytes()


def test_single_program_views_of_a_placed_function_point_to_the_mesh() -> None:
    lowered = ts.jit(tp_mlp).lower(*tp_args())
    for view in (lambda: lowered.target(), lambda: lowered.ptx(), lambda: lowered.seconds()):
        with pytest.raises(UnsupportedError, match="placed on a mesh") as err:
            view()
        assert ".mesh" in (err.value.hint or "")
