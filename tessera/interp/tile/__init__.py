"""The tile simulator: the definition of meaning of Tile IR.

``launcher`` runs a compiled kernel over a launch (schedules, results, the restore of a
failed launch); ``exec`` compiles Tile IR into steps; ``reference/`` holds the plain
rule of each control-flow and memory op (the definition a reader checks against
docs/kernels.md); ``context``, ``state``, ``sync`` and ``phase`` hold the programs, the
launch state, barriers and race phases; ``rules``, ``numeric`` and ``mma`` define the
value ops; ``memory/`` the global and shared memories with their sanitizer checks;
``fastpaths/`` the registry of optimisations that give the definition's bits faster,
each with its proof and switch (``mode="reference"`` runs without them); ``analysis``
what a kernel does to each parameter; ``errors`` the sanitizer's reports.

The launch API below loads on first use: the kernel front end's error types
(``errors``) are needed by ``import tessera``, the simulator is not.
"""

from tessera import lazy

__all__ = ["SCHEDULES", "Analysis", "LaunchGeometry", "PreparedKernel", "analyse", "launch",
           "prepare"]
__getattr__, __dir__ = lazy.attach(__name__, globals(),
                                   lazy.names("tessera.interp.tile.launcher", *__all__))
