"""The kernel compiler: a kernel function's Python AST into Tile IR. ``compile`` is the
entry (one specialisation into a verified module); ``build`` the compiler object, made
of the statement (``stmt``, ``loops``), expression (``expr``, ``view``), call
(``call``) and tile API (``api``) parts; ``scope`` the names a body sees."""
