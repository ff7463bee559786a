"""IR passes, one per file (placements in ``sharding/``, Schedule IR's passes in
``schedule/``); importing this package registers them all."""

from tessera.ir.transforms import canonicalize, cse, dce, schedule, sharding

__all__ = ["canonicalize", "cse", "dce", "schedule", "sharding"]
