"""The renderer's rule table is complete however the package is first entered: its
``__init__`` imports every module that registers rules, so a fresh interpreter that
imports only the table module already has a rule for every Target IR op."""

from __future__ import annotations

from tests.test_imports import run_python


def test_importing_the_table_alone_registers_every_rule() -> None:
    missing, control_flow = run_python("""
        import json
        from tessera.backend.ptx.render.emit import RULES
        from tessera.ir.core import OPS
        from tessera.ir.dialects.target import For

        missing = sorted(name for name, cls in OPS.items()
                         if name.startswith("ptx.") and not cls.terminator
                         and cls not in RULES)
        print(json.dumps([missing, For in RULES]))
    """)  # type: ignore[misc]
    assert missing == []
    assert control_flow  # registered by render.kernel, not by the op modules
