"""The conformance suite: Tessera checked against its specification.

Each case asserts one behaviour the specification (``programming-model-guide.md``,
``guide-ch1``/``guide-ch2``, ``overview-and-quickstart.md``) or a ruling of
``docs/decisions.md`` states, against an independent reference: NumPy float64,
``ml_dtypes``, ``fractions.Fraction`` or the written rule. The cases live in
``cases/`` (one module per area), the seed examples verbatim in ``seeds.py`` and
``tile_seeds.py``, their corrected kernels in ``kernels/``.

    tessera conformance --backend interp --report out.html --junit out.xml

From Python::

    from tessera import conformance
    report = conformance.run(conformance.select("numerics"), backend="interp")
"""

from tessera.conformance.registry import (
    BACKENDS,
    REGISTRY,
    Case,
    Skip,
    case,
    register,
    select,
)
from tessera.conformance.runner import Report, Result, run

__all__ = ["BACKENDS", "REGISTRY", "Case", "Report", "Result", "Skip", "case", "register",
           "run", "select"]
