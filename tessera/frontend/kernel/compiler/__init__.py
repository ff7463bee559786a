"""The kernel compiler: a kernel function's Python AST into Tile IR.

``compile`` is the entry (one specialisation into a verified module). A compilation is
a :class:`~tessera.frontend.kernel.compiler.state.CompileState` (insertion point,
source position, variables, free names) passed to rules looked up by node class in the
tables of ``rules``: statements (``stmt``, ``loops``; ``merge`` joins the types of
variables at control flow), expressions (``expr``, ``view`` for subscripts, ``call``),
and the ``ts.tile.*`` calls by name (``api``, ``api_compute``, ``masked``). ``scope`` is what a
body can name. Each rule module registers its rules when imported, here.
"""

from tessera.frontend.kernel.compiler import (  # noqa: F401 - registers the rules
    api,
    api_compute,
    call,
    expr,
    loops,
    masked,
    stmt,
    view,
)
