"""The Graph IR interpreter: ``runner`` runs functions and single ops; the rule modules
(``elementwise``, ``reduce``, ``structure``, ``collective``, ``kernel``) register their rules."""

from tessera.interp.graph.runner import IMPL, MODES, Apply, Rule, run_function, run_op

__all__ = ["IMPL", "MODES", "Apply", "Rule", "run_function", "run_op"]
