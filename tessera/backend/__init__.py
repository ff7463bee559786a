"""The code generators below the front end: each takes Target IR, the lowest level of
the IR, to what a machine runs. ``ptx/`` renders PTX and drives the CUDA toolchain and
driver; nothing here knows the Python front end that produced the IR.
"""
