"""The style sheet and script inlined into every explain page (no network access).

The script implements the linking rule: every element with a ``data-src`` attribute
(a line of a panel, a node of a dataflow graph) belongs to that source line; hovering
one adds the class ``hl`` to every element of the same line in all panels, and scrolls
each other panel to its first highlighted line when it is out of view.
"""

CSS = """
:root { --bg: #fbfbfa; --panel: #ffffff; --ink: #1f2328; --muted: #656d76;
  --rule: #d0d7de; --hl: #fff3b0; --hl-edge: #e3b341; --err: #b42318; }
* { box-sizing: border-box; }
body { margin: 0; padding: 16px 24px 40px; background: var(--bg); color: var(--ink);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
h1 { font-size: 20px; margin: 0 0 4px; }
h2 { font-size: 14px; margin: 0; padding: 6px 10px; border-bottom: 1px solid var(--rule);
  background: #f6f8fa; }
h3 { font-size: 16px; margin: 24px 0 8px; }
.muted { color: var(--muted); }
.panels { display: grid; grid-auto-flow: column; grid-auto-columns: minmax(360px, 1fr);
  gap: 10px; overflow-x: auto; margin-top: 12px; }
.panel { background: var(--panel); border: 1px solid var(--rule); border-radius: 6px;
  min-width: 0; }
.code { position: relative; height: 62vh; overflow: auto;
  font: 12px/1.5 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.ln { display: flex; white-space: pre; border-left: 3px solid transparent;
  padding-right: 8px; }
.ln .no { flex: none; width: 3.5em; padding-right: 8px; text-align: right;
  color: #8c959f; user-select: none; }
.ln[data-src] { cursor: pointer; }
.ln.hl { background: var(--hl); border-left-color: var(--hl-edge) !important; }
.error { padding: 10px; color: var(--err); white-space: pre-wrap;
  font: 12px/1.5 ui-monospace, monospace; }
section.drawing { background: var(--panel); border: 1px solid var(--rule);
  border-radius: 6px; padding: 10px 14px; margin-top: 14px; overflow-x: auto; }
svg.dataflow text { font: 12px ui-monospace, monospace; text-anchor: middle;
  fill: var(--ink); }
svg.dataflow text.type { fill: var(--muted); font-size: 10px; }
svg.dataflow .node rect { fill: #eef4ff; stroke: #4f6fa8; }
svg.dataflow .node.arg rect { fill: #f0fdf4; stroke: #3f8f5a; }
svg.dataflow .node.hl rect { fill: var(--hl); stroke: var(--hl-edge); stroke-width: 2; }
svg.dataflow .node[data-src] { cursor: pointer; }
svg.dataflow .edge { fill: none; stroke: #6b7280; stroke-width: 1.2; }
svg.dataflow .kernel rect { fill: #f5f0ff; stroke: #8b6fd1; stroke-dasharray: 4 3; }
svg.dataflow .kernel text { font: 11px ui-monospace, monospace; fill: #6d4fc0;
  text-anchor: start; }
.tiles { display: flex; flex-wrap: wrap; gap: 16px; }
figure.tile { margin: 0; }
figure.tile figcaption { font: 12px ui-monospace, monospace; color: var(--muted); }
.legend { display: flex; flex-wrap: wrap; gap: 10px; margin: 6px 0 10px; font-size: 12px; }
.legend i { display: inline-block; width: 12px; height: 12px; margin-right: 4px;
  vertical-align: -2px; border: 1px solid #0002; }
.finding { border-left: 4px solid var(--err); background: #fef3f2; padding: 6px 10px;
  margin: 8px 0; }
.finding pre { margin: 4px 0 0; white-space: pre-wrap; font-size: 12px; }
table.stats { border-collapse: collapse; font-size: 13px; }
table.stats td, table.stats th { border: 1px solid var(--rule); padding: 3px 10px;
  text-align: right; }
table.stats th { background: #f6f8fa; }
pre.estimate { font-size: 12px; background: #f6f8fa; padding: 8px; border-radius: 4px; }
figure.sharding { margin: 4px 0 12px; }
figure.sharding figcaption { font-size: 12px; color: var(--muted); }
"""

JS = """
(function () {
  function hue(n) { return 'hsl(' + ((n * 47) % 360) + ', 55%, 62%)'; }
  function mark(src, on, origin) {
    var els = document.querySelectorAll('[data-src="' + src + '"]');
    els.forEach(function (e) { e.classList.toggle('hl', on); });
    if (!on) return;
    document.querySelectorAll('.code').forEach(function (box) {
      if (box.contains(origin)) return;
      var first = box.querySelector('.hl');
      if (!first) return;
      var top = first.offsetTop, bottom = top + first.offsetHeight;
      if (top < box.scrollTop || bottom > box.scrollTop + box.clientHeight) {
        box.scrollTop = Math.max(0, top - box.clientHeight / 3);
      }
    });
  }
  document.querySelectorAll('[data-src]').forEach(function (e) {
    var src = e.getAttribute('data-src');
    if (e.classList.contains('ln')) e.style.borderLeftColor = hue(parseInt(src, 10));
    e.addEventListener('mouseenter', function () { mark(src, true, e); });
    e.addEventListener('mouseleave', function () { mark(src, false, e); });
  });
})();
"""

__all__ = ["CSS", "JS"]
