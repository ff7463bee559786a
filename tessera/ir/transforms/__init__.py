"""IR passes, one per file; importing this package registers them all."""

from tessera.ir.transforms import canonicalize, cse, dce, shard_check, shard_propagation

__all__ = ["canonicalize", "cse", "dce", "shard_check", "shard_propagation"]
