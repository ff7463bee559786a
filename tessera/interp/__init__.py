"""Interpreters: the definition of meaning of each IR level.

``run_function`` and ``run_op`` run Graph IR on NumPy arrays; ``IMPL`` is the rule
table keyed by op class.
"""

from tessera.interp.apply import IMPL, MODES, Apply, Rule, rule
from tessera.interp.graph import run_function, run_op

__all__ = ["IMPL", "MODES", "Apply", "Rule", "rule", "run_function", "run_op"]
