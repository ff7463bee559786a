"""Arithmetic in registers that PTX has no single instruction for: the specified
``exp`` of f32 and f64, the specified binary64 ``erf``, ``erfc``, ``tanh`` and ``log``,
reduction trees and shuffles, and fp8 values held in f32 registers."""
