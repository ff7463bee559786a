"""A notebook run by a real Jupyter kernel: a kernel defined in a cell compiles and
runs, and IR, lowered programs and DistTensors show their HTML forms."""

from __future__ import annotations

from pathlib import Path

import pytest

from tessera.explain.notebook import ir_html, text_box

NOTEBOOK = Path(__file__).parents[2] / "examples" / "explain" / "notebook.ipynb"


def _outputs(cell) -> tuple[str, dict[str, str]]:
    text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
    data: dict[str, str] = {}
    for o in cell.outputs:
        data.update(o.get("data", {}))
    return text, data


def test_notebook_runs_in_a_jupyter_kernel() -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    text, _ = _outputs(code[1])  # the kernel of a cell, launched
    assert text.strip() == str([2.0 * k for k in range(8)])
    _, data = _outputs(code[2])  # a lowered graph function
    assert "<details open><summary>graph IR</summary>" in data["text/html"]
    assert "graph.exp" in data["text/html"] and 'class="kernel"' in data["text/html"]
    _, data = _outputs(code[3])  # its Graph IR module
    assert data["text/html"].startswith('<pre class="tessera-ir"')
    text, data = _outputs(code[4])  # a DistTensor: printed picture and HTML
    assert "┼" in text and "dev 3" in text
    assert data["text/html"].count("<rect") == 4
    text, _ = _outputs(code[5])  # the explain page of the cell's kernel links its lines
    assert int(text) > 10


def test_ir_html_escapes_the_text() -> None:
    assert "&lt;4xf32&gt;" in text_box("tensor<4xf32>")
    import tessera as ts

    module = ts.jit(lambda a: a + 1.0).lower(ts.as_tensor([1.0, 2.0])).compiled.module
    assert ir_html(module).count("graph.add") == 1
