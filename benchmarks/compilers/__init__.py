"""The programs and per-compiler scripts of ``benchmarks/schedule_counts.py``.

``tessera_side`` runs in the project's environment; ``tinygrad_counts``,
``inductor_counts`` and ``jax_counts`` each run in their own environment
(``benchmarks/setup_compiler_envs.sh``) as a subprocess printing JSON; ``common`` holds
what they share (the programs' arguments, the timing harness) and imports NumPy only.
"""
