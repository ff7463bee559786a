"""The dataflow drawings of Graph and Schedule IR, and the sharding pictures."""

from __future__ import annotations

import io

import numpy as np
import pytest

import tessera as ts
from tessera.errors import ArgumentError
from tessera.explain import graphsvg
from tessera.explain.sharding import blocks, sharding_html, sharding_text, visualize_sharding
from tessera.ir.transforms.schedule import schedule_module
from tests.explain import subjects


def _module():
    a = np.ones((4, 8), np.float32)
    return ts.jit(subjects.scaled_sum).lower(a, a).compiled.module


def test_graph_drawing_has_a_node_per_argument_and_op_and_an_edge_per_use() -> None:
    module = _module()
    fn = module.functions["scaled_sum"]
    svg = graphsvg.svg(fn, subjects.__file__)
    ops = [i for i in fn.body.instrs]
    assert svg.count('<g class="node') == len(fn.body.args) + len(ops)
    uses = sum(len({id(v) for v in i.operands}) for i in ops)
    assert svg.count('class="edge"') == uses
    line = subjects.line_of("c = a * 2.0 + b")
    assert f'data-src="{line}"' in svg
    # every node lies below each of its producers
    nodes = graphsvg._build(fn, subjects.__file__)
    graphsvg._layout(nodes)
    assert all(n.y > nodes[p].y for n in nodes for p in n.preds)


def test_schedule_drawing_boxes_each_kernel_around_its_ops() -> None:
    scheduled = schedule_module(_module())
    fn = scheduled.functions["scaled_sum"]
    kernels = [i for i in fn.body.instrs if i.op.name == "schedule.kernel"]
    svg = graphsvg.svg(fn, subjects.__file__)
    assert svg.count('<g class="kernel">') == len(kernels) >= 1
    inner = sum(len([j for j in k.regions[0].blocks[0].instrs
                     if j.op.name != "schedule.yield"]) for k in kernels)
    outer = len([i for i in fn.body.instrs if i.op.name != "schedule.kernel"])
    assert svg.count('<g class="node') == len(fn.body.args) + inner + outer


def _mesh_tensor(spec: ts.ShardSpec, shape=(8, 16)):
    mesh = ts.dist.mesh(axes=("dp", "tp"), shape=(2, 2))
    return ts.dist.from_numpy(np.zeros(shape, np.float32), mesh=mesh, layout=spec)


def test_sharding_text_puts_each_device_in_its_block() -> None:
    t = _mesh_tensor(ts.ShardSpec((0, 1), ("dp", "tp")))
    text = sharding_text(t)
    rows = [line for line in text.splitlines() if "dev" in line]
    assert len(rows) == 2
    assert rows[0].index("dev 0") < rows[0].index("dev 1")
    assert rows[1].index("dev 2") < rows[1].index("dev 3")
    assert text.count("┼") == 1 and text.count("┌") == 1
    out = io.StringIO()
    visualize_sharding(t, file=out)
    assert out.getvalue() == text
    assert ts.visualize_sharding is visualize_sharding


def test_replicated_axes_list_every_holder() -> None:
    t = _mesh_tensor(ts.ShardSpec(("col",), ("tp",)))
    (rows, cols), found = blocks(t)
    assert (rows, cols) == (8, 16)
    assert found == {(0, 8, 0, 8): ["dev 0", "dev 2"], (0, 8, 8, 16): ["dev 1", "dev 3"]}
    assert "dev 0, dev 2" in sharding_text(t)
    html = sharding_html(t)
    assert html.count("<rect") == 2 and "dev 1, dev 3" in html
    assert t._repr_html_().count("<rect") == 2


def test_vectors_draw_one_row_and_non_dist_values_are_refused() -> None:
    mesh = ts.dist.mesh(axes=("x",), shape=(4,))
    t = ts.dist.from_numpy(np.zeros(32, np.float32), mesh=mesh,
                           layout=ts.ShardSpec((0,), ("x",)))
    line = next(s for s in sharding_text(t).splitlines() if "dev" in s)
    assert [line.index(f"dev {k}") for k in range(4)] == sorted(
        line.index(f"dev {k}") for k in range(4))
    with pytest.raises(ArgumentError, match="takes a DistTensor"):
        sharding_text(np.zeros(3))


def test_a_sharded_function_page_draws_its_mesh_timeline() -> None:
    """The run that draws a sharded function's results is profiled: the page has a
    slice per recorded event of the drawn devices, and the downloadable trace is the
    profile's own trace-event JSON."""
    import base64
    import json
    import re

    from tessera.explain import sharding as sharding_mod
    from tessera.mesh_sim.profile import profile

    t = _mesh_tensor(ts.ShardSpec((0,), ("dp",)))

    def total(x):
        return ts.sum(x * 2.0)

    sections = dict(sharding_mod.sections({"x": t}, total))
    html = sections["Mesh timeline"]
    with profile() as prof:
        total(t)
    assert prof.events, "the program has a collective to draw"
    assert html.count("<rect") == len(prof.events)
    data = re.search(r'href="data:application/json;base64,([^"]+)"', html).group(1)
    assert json.loads(base64.b64decode(data)) == json.loads(json.dumps(prof.trace()))
