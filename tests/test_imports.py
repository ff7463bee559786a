"""What ``import tessera`` loads, and what loads on first use.

Each check runs in a fresh interpreter: the test process has imported everything
already, so only a new one shows what an import statement loads by itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parent / "golden"

#: module name prefixes that a plain ``import tessera`` must not load
LAZY_PREFIXES = ("networkx", "llvmlite", "mpi4py", "cuda", "tessera.mesh_sim", "tessera.backend",
                 "tessera.frontend.kernel.backends", "tessera.dist", "tessera.frontend.ptx",
                 "tessera.ir.text.ptx", "tessera.interp.target")
#: and modules: the tile kernel compiler and the tile simulator (``ts.kernel``)
LAZY_MODULES = ("tessera.frontend.kernel.entry", "tessera.frontend.kernel.compiler.compile",
                "tessera.frontend.kernel.tuning.autotune", "tessera.interp.tile.launcher",
                "tessera.interp.tile.exec", "tessera.lower.core")


def run_python(code: str) -> object:
    """Run ``code`` in a fresh interpreter and return what it prints (one JSON value)."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, check=False)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def lazy_loaded(modules: list[str]) -> list[str]:
    """The modules among ``modules`` that ``import tessera`` must leave for later."""
    return [m for m in modules if m in LAZY_MODULES
            or any(m == p or m.startswith(p + ".") for p in LAZY_PREFIXES)]


def test_import_tessera_loads_no_simulator_backend_or_networkx() -> None:
    modules = run_python("""
        import json, sys
        import tessera
        print(json.dumps(sorted(sys.modules)))
    """)
    assert isinstance(modules, list)
    assert "tessera.frontend.graph.jit" in modules  # the check itself sees the front end
    assert lazy_loaded(modules) == []


def test_lazy_names_load_on_first_access_and_are_the_defining_objects() -> None:
    result = run_python("""
        import importlib, json, sys
        import tessera as ts
        from tessera import lazy

        before = "networkx" in sys.modules
        mesh = ts.dist.mesh(devices=[f"cuda:{i}" for i in range(4)], axes=("dp", "tp"),
                            shape=(2, 2))
        # a mesh needs no graphs, and no simulator runtime
        after_mesh = "networkx" in sys.modules or "tessera.mesh_sim" in sys.modules
        checks = {
            "dist": ts.dist is importlib.import_module("tessera.dist"),
            "Region": ts.Region is importlib.import_module("tessera.dist.core.regions").Region,
            "index_launch": ts.index_launch
                is importlib.import_module("tessera.dist.launch").index_launch,
            "all_gather": ts.all_gather
                is importlib.import_module("tessera.mesh_sim.spmd.api").all_gather,
            "DistTensor": ts.DistTensor
                is importlib.import_module("tessera.dist.core.tensor").DistTensor,
            "ShardSpec": ts.ShardSpec is ts.dist.ShardSpec,
            "MeshError": ts.MeshError is ts.dist.MeshError
                is importlib.import_module("tessera.errors").MeshError,
            "MaterializeError": ts.MaterializeError is ts.dist.MaterializeError,
            "Pipeline": importlib.import_module("tessera.dist.pipeline").Pipeline
                is importlib.import_module("tessera.dist.pipeline.run").Pipeline,
            "mesh": type(mesh).__name__ == "Mesh",
            "kernel": ts.kernel
                is importlib.import_module("tessera.frontend.kernel").kernel,
            "simulator": "tessera.interp.tile.launcher" in sys.modules,
        }
        print(json.dumps([before, after_mesh, checks]))
    """)
    before, after_mesh, checks = result  # type: ignore[misc]
    assert not before and not after_mesh
    assert checks == {name: True for name in checks}


def test_every_public_name_resolves() -> None:
    # ``from tessera import *`` and ``tessera.dist.<name>`` read every lazy name.
    result = run_python("""
        import json
        import tessera, tessera.dist, tessera.dist.pipeline, tessera.mesh_sim
        from tessera import *
        missing = [f"{m.__name__}.{n}"
                   for m in (tessera, tessera.dist, tessera.dist.pipeline, tessera.mesh_sim)
                   for n in m.__all__ if not hasattr(m, n)]
        unlisted = [n for n in tessera.__all__ + tessera.dist.__all__
                    if n not in dir(tessera) + dir(tessera.dist)]
        print(json.dumps([missing, unlisted, Region.__name__, tessera.dist.mpi.__name__]))
    """)
    assert result == [[], [], "Region", "tessera.mesh_sim.mpi"]


def test_unknown_names_are_attribute_errors() -> None:
    import tessera
    from tessera import dist, mesh_sim

    for module in (tessera, dist, mesh_sim):
        with pytest.raises(AttributeError, match="no_such_name"):
            module.no_such_name  # noqa: B018
        assert not hasattr(module, "no_such_name")


@pytest.mark.parametrize("package", ["tessera.dist", "tessera.dist.pipeline", "tessera.mesh_sim"])
def test_public_names_stay_themselves_after_every_submodule_is_imported(package) -> None:
    # Importing a submodule binds its name on the package: a public name that is also a
    # submodule's name would turn into that module (mesh_sim/__init__.py imports
    # ``profile`` eagerly for that reason).
    result = run_python(f"""
        import importlib, json, pkgutil, types
        pkg = importlib.import_module("{package}")
        for info in pkgutil.walk_packages(pkg.__path__, "{package}."):
            importlib.import_module(info.name)
        print(json.dumps([n for n in pkg.__all__
                          if isinstance(getattr(pkg, n), types.ModuleType)]))
    """)
    assert result == []


def test_import_tessera_ir_parses_every_golden_ir_file() -> None:
    # The IR package registers all its dialects (graph, tile, target) on import.
    paths = sorted(str(p) for p in GOLDEN.rglob("*.tir"))
    assert len(paths) > 30
    result = run_python(f"""
        import json, pathlib
        import tessera.ir as ir

        failed = []
        for path in {paths!r}:
            try:
                module = ir.parse_module(pathlib.Path(path).read_text(), path)
                ir.verify_module(module)
                text = ir.print_module(module)
                assert ir.print_module(ir.parse_module(text, path)) == text
            except Exception as err:
                failed.append(f"{{path}}: {{err}}")
        print(json.dumps(failed))
    """)
    assert result == []
