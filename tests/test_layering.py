"""The package's layers: no module imports, at module level, a module of a higher layer.

Lower layers are the ones the rest stands on: a number format knows nothing of the IR,
the IR nothing of its interpreters, the tile simulator nothing of the kernel front end
that compiles Python into Tile IR, the front end nothing of the mesh simulator's
runtime, and the simulator nothing of the distributed API's launches, pipelines and
experts (only of the meshes, shard specs and DistTensors it runs on). Imports inside
functions (made on first use, to keep ``import tessera`` cheap) and under
``if TYPE_CHECKING:`` are not module-level and may reach up.
"""

from __future__ import annotations

import ast
from pathlib import Path

import tessera

#: lowest first; a module belongs to the longest prefix that names it
LAYERS: list[tuple[str, ...]] = [
    ("tessera.errors", "tessera.files", "tessera.lazy", "tessera.mesh_checks", "tessera.progress"),
    ("tessera.numerics", "tessera.arch"),
    ("tessera.ir",),
    ("tessera.interp", "tessera.lower"),
    ("tessera.backend",),  # Target IR to PTX text, assembly and the CUDA driver
    ("tessera.frontend",),
    # transforms and entry points over the front end's traced functions and kernels
    ("tessera.autodiff", "tessera.frontend.kernel.backends"),
    # the distributed vocabulary (meshes, shard specs, DistTensor, regions), the mesh
    # simulator's runtime that moves and computes it, and the API over both
    ("tessera.dist.core",),
    ("tessera.mesh_sim",),
    ("tessera.dist",),
    # (the conformance suite checks the whole package; the command line offers it)
    ("tessera.graph", "tessera.op", "tessera.tile", "tessera.cli", "tessera.cli_examples",
     "tessera.cli_ptx",
     "tessera.__main__", "tessera", "tessera.conformance",
     "tessera.explain"),  # pages over every level, for the command line and notebooks
]
PACKAGE = Path(tessera.__file__).parent


def layer_of(module: str) -> int:
    """The layer of a dotted module name (the longest matching prefix decides)."""
    best, length = -1, -1
    for k, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > length:
                best, length = k, len(prefix)
    return best


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported(module: str, name: str) -> str:
    """What ``from module import name`` imports: the submodule ``module.name`` when
    there is one (``from tessera import lazy``), else a name of ``module``."""
    sub = PACKAGE.parent.joinpath(*module.split("."), name)
    return f"{module}.{name}" if sub.is_dir() or sub.with_suffix(".py").exists() else module


def module_level_imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported module) of every import at module level (not in functions, not
    under ``if``, which is how ``TYPE_CHECKING`` imports are written)."""
    found = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.lineno, _imported(node.module, a.name)) for a in node.names]
    return [(line, m) for line, m in found if m == "tessera" or m.startswith("tessera.")]


def test_every_module_has_a_layer() -> None:
    missing = [module_name(p) for p in PACKAGE.rglob("*.py")
               if layer_of(module_name(p)) < 0]
    assert not missing


def test_no_module_imports_from_a_higher_layer() -> None:
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        me = module_name(path)
        for line, target in module_level_imports(path):
            if layer_of(target) > layer_of(me):
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {me} imports "
                              f"{target}")
    assert not upward, "\n".join(upward)


def test_the_rule_sees_an_upward_import(tmp_path: Path) -> None:
    """The checker itself: a module of the IR importing the front end is caught."""
    fake = tmp_path / "fake.py"
    fake.write_text("import numpy\nfrom tessera.frontend.graph import jit\n\ndef f():\n"
                    "    from tessera import dist\n")
    found = module_level_imports(fake)
    assert found == [(2, "tessera.frontend.graph.jit")]
    assert layer_of("tessera.frontend.graph.jit") > layer_of("tessera.ir.core")
    assert layer_of("tessera.frontend.kernel.entry") > layer_of("tessera.backend.ptx.render")
    assert (layer_of("tessera.frontend.kernel.backends.launch")
            > layer_of("tessera.frontend.kernel.entry"))
