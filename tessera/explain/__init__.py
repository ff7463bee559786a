"""Explain pages: a kernel or graph function's source, IR levels and PTX side by side.

``tessera explain FILE.py:FUNC --html out.html`` (:mod:`.command`) writes one
self-contained page (:mod:`.page`): the Python source and every IR level and the PTX
in linked panels (:mod:`.linkmap`: hovering a line highlights the lines compiled from
the same source line), the Graph and Schedule IR as dataflow drawings
(:mod:`.graphsvg`), a kernel's tile map with any sanitizer finding (:mod:`.tilemap`,
:mod:`.tiledraw`), ptxas statistics and the static estimate (:mod:`.stats`), and the
sharding of distributed arguments (:mod:`.sharding`). :mod:`.notebook` gives IR,
compiled programs and DistTensors their notebook (``_repr_html_``) form.

The modules load on first use: the command line imports only :mod:`.command`.
"""

from tessera import lazy

__all__ = ["ExplainError", "explain", "explain_page", "sharding_html", "sharding_text",
           "visualize_sharding", "write_page"]
__getattr__, __dir__ = lazy.attach(__name__, globals(), {
    **lazy.names("tessera.explain.errors", "ExplainError"),
    **lazy.names("tessera.explain.collect", "explain"),
    **lazy.names("tessera.explain.command", "explain_page", "write_page"),
    **lazy.names("tessera.explain.sharding", "sharding_html", "sharding_text",
                 "visualize_sharding"),
})
