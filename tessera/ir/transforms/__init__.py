"""IR passes, one per file (placements in ``sharding/``); importing this package
registers them all."""

from tessera.ir.transforms import canonicalize, cse, dce, sharding

__all__ = ["canonicalize", "cse", "dce", "sharding"]
