"""Fast paths of the tile simulator, each giving the plain definition's bits and reports
faster (the proof of each is in its module's docstring): remembered coordinate results
(``memo``), deferred ``mma`` K loops (``pending``), the later trips of staged
``cp_async`` + ``mma`` K loops (``staged``), strided per-tile sums (``sum``) and the
shared-memory reduction tree (``tree``). ``mode="reference"`` compiles none of them."""
