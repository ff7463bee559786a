"""Pipeline parallelism: stages over a ``pp`` axis, micro-batches, checked schedules.

* :mod:`.schedule` -- :class:`Schedule`, ``gpipe`` and ``one_f_one_b``;
* :mod:`.check` -- the dependence graph of a schedule (networkx): deadlocks and
  missing steps are refused before anything runs;
* :mod:`.run` -- :class:`Pipeline` and :class:`Stage`: a model cut into stages;
* :mod:`.execute` -- running a schedule step by step (forward, backward, gradient
  accumulation) on the simulated timeline;
* :mod:`.comm` -- the block transfers between stages and experts, through the
  simulator's collectives.

The package imports none of its modules; ``ts.dist`` names what users need.
"""
