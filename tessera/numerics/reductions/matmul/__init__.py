"""``matmul_rounded``: the correctly rounded matrix product (see :mod:`.product`)."""
