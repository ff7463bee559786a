"""``from tessera import graph``: ``@graph.module("name")`` and the operators."""

from tessera.frontend.graph.jit import module  # noqa: F401 - re-exported
from tessera.op import *  # noqa: F403 - the operators, as graph.matmul etc.
