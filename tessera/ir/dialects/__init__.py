"""The IR's dialects, one package per level: ``graph`` (operator graphs), ``tile`` (tile
kernels: types, compute, ids, memory) and ``target`` (one op per PTX instruction
family, with its async and ordering rules). Each registers its ops and types with the
parser when imported; ``tessera.ir`` imports all three."""
