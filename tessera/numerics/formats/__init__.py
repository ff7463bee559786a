"""Number formats: the :class:`DType` values and the conversions between them.

* :mod:`.dtypes` -- the :class:`DType` values (``f32``, ``bf16``, ``fp8_e4m3``, ...) and
  :func:`dtype`, which reads every spelling of a format.
* :mod:`.names` -- the aliases of each format's canonical name.
* :mod:`.promotion` -- :func:`promote`, the common format of two operands.
* :mod:`.convert` -- RNE conversion with PTX ``satfinite`` saturation.
* :mod:`.e8m0` -- conversion to the unsigned power-of-two scale format.
* :mod:`.stochastic` -- Philox-4x32-10 and stochastic rounding.
"""
