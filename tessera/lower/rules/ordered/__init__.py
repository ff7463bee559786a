"""Updates of global memory from several tiles, applied in the interpreters' order on
a GPU (DECISIONS.md: accumulated across tiles in a fixed order).

``events``: each execution of an update numbered in its tile's program order;
``values``: a lowered kernel's index arithmetic evaluated for every CTA or thread while
compiling (which tiles meet at an element or window); ``scalar``: one element updated
by several tiles, recorded in slots; ``windows``: ``C[window] += tile`` where the CTAs'
windows are known while compiling (split-K), folded by each window's last CTA;
``rows``: any other tensor update, its rows recorded with their addresses; ``fold``:
the kernel's end, where the last CTA applies the recorded updates in order.
"""
