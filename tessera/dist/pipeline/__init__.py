"""Pipeline parallelism: stages over a ``pp`` axis, micro-batches, checked schedules.

* :mod:`.schedule` -- :class:`Schedule`, ``gpipe`` and ``one_f_one_b``;
* :mod:`.check` -- the dependence graph of a schedule (networkx): deadlocks and
  missing steps are refused before anything runs;
* :mod:`.run` -- :class:`Pipeline` and :class:`Stage`: a model cut into stages;
* :mod:`.execute` -- running a schedule step by step (forward, backward, gradient
  accumulation) on the simulated timeline;
* :mod:`.comm` -- the block transfers between stages and experts, through the
  simulator's collectives.

``from tessera.dist.pipeline import Pipeline, Stage, gpipe`` imports the module that
defines each name on first use.
"""

from typing import TYPE_CHECKING

from tessera import lazy

if TYPE_CHECKING:  # what the lazy names are, for type checkers and linters
    from tessera.dist.pipeline.run import Pipeline, PipelineResult, Stage
    from tessera.dist.pipeline.schedule import (
        DeadlockError,
        Schedule,
        ScheduleError,
        gpipe,
        one_f_one_b,
    )

__getattr__, __dir__ = lazy.attach(__name__, globals(), {
    **lazy.names("tessera.dist.pipeline.schedule", "DeadlockError", "Schedule", "ScheduleError",
                 "gpipe", "one_f_one_b"),
    **lazy.names("tessera.dist.pipeline.run", "Pipeline", "PipelineResult", "Stage"),
})

__all__ = ["DeadlockError", "Pipeline", "PipelineResult", "Schedule", "ScheduleError", "Stage",
           "gpipe", "one_f_one_b"]
