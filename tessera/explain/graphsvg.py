"""A Graph or Schedule IR function drawn as a dataflow graph in SVG.

Nodes are the function's arguments and ops, edges the values between them, drawn top
to bottom in layers: an op sits one layer below the lowest of its operands' producers
(a longest-path layering), and each layer is ordered by the mean position of its
producers (one barycentre sweep, which removes most crossings of these small graphs).
A ``schedule.kernel`` is drawn as a box around the ops fused into it: its body's
arguments stand for the kernel's operands and its ``schedule.yield`` for its results.
Every op node carries its source line, so hovering it highlights the linked lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape

from tessera.explain.linkmap import same_file
from tessera.ir.core import Block, Function, Instr, Value

NODE_W, NODE_H, GAP_X, GAP_Y, PAD = 128, 36, 150, 78, 12


@dataclass
class Node:
    """One drawn node: a label, its type, its source line, its kernel box."""

    label: str
    detail: str
    src: int | None
    cluster: str | None = None
    preds: list[int] = field(default_factory=list)
    layer: int = 0
    x: float = 0.0
    y: float = 0.0


def _short_type(v: Value) -> str:
    text = str(v.type)
    return text[len("tensor<"):-1] if text.startswith("tensor<") else text


def _build(fn: Function, file: str) -> list[Node]:
    nodes: list[Node] = []
    producer: dict[int, int] = {}
    for a in fn.body.args:
        producer[id(a)] = len(nodes)
        nodes.append(Node(a.hint or "arg", _short_type(a), None))

    def src_of(instr: Instr) -> int | None:
        return instr.loc.line if same_file(instr.loc.file, file) else None

    def add(instr: Instr, cluster: str | None) -> None:
        node = Node(instr.op.name.split(".", 1)[-1],
                    _short_type(instr.results[0]) if instr.results else "",
                    src_of(instr), cluster,
                    sorted({producer[id(v)] for v in instr.operands if id(v) in producer}))
        for r in instr.results:
            producer[id(r)] = len(nodes)
        nodes.append(node)

    def walk_block(block: Block, cluster: str | None) -> None:
        for instr in block.instrs:
            if instr.op.name == "schedule.kernel" and instr.regions:
                body = instr.regions[0].blocks[0]
                for arg, operand in zip(body.args, instr.operands):
                    if id(operand) in producer:
                        producer[id(arg)] = producer[id(operand)]
                label = str(getattr(instr.op, "label", "") or f"kernel {len(nodes)}")
                walk_block(body, label)
                last = body.instrs[-1] if body.instrs else None
                if last is not None and last.op.name == "schedule.yield":
                    for r, v in zip(instr.results, last.operands):
                        if id(v) in producer:
                            producer[id(r)] = producer[id(v)]
            elif instr.op.name == "schedule.yield":
                continue
            else:
                add(instr, cluster)

    walk_block(fn.body, None)
    return nodes


def _layout(nodes: list[Node]) -> tuple[float, float]:
    for node in nodes:
        node.layer = 1 + max((nodes[p].layer for p in node.preds), default=-1)
    # then as late as possible (arguments stay on top): a constant or an early op
    # sits just above its first user instead of sending a long edge past other nodes
    users: dict[int, list[int]] = {}
    for k, node in enumerate(nodes):
        for p in node.preds:
            users.setdefault(p, []).append(k)
    for k in range(len(nodes) - 1, -1, -1):
        if nodes[k].preds and k in users:
            nodes[k].layer = max(nodes[k].layer, min(nodes[u].layer for u in users[k]) - 1)
    layers: dict[int, list[int]] = {}
    for k, node in enumerate(nodes):
        layers.setdefault(node.layer, []).append(k)
    width = max(len(v) for v in layers.values())
    for depth in sorted(layers):
        order = layers[depth]
        if depth:  # barycentre of the producers, kernel members kept together
            order.sort(key=lambda k: (nodes[k].cluster or "",
                                      sum(nodes[p].x for p in nodes[k].preds)
                                      / max(1, len(nodes[k].preds))))
        left = (width - len(order)) * GAP_X / 2
        for i, k in enumerate(order):
            nodes[k].x = PAD + left + i * GAP_X
            nodes[k].y = PAD + 24 + depth * GAP_Y
    return PAD * 2 + width * GAP_X, PAD * 2 + 24 + len(layers) * GAP_Y


def _fit(text: str, n: int) -> str:
    """``text`` cut to ``n`` characters, the cut marked (the node's title has it all)."""
    return text if len(text) <= n else text[:n - 1] + "…"


def svg(fn: Function, file: str) -> str:
    """The SVG drawing of ``fn`` (a ``graph.func`` or ``schedule.func``)."""
    nodes = _build(fn, file)
    if not nodes:
        return '<p class="muted">(empty function)</p>'
    w, h = _layout(nodes)
    out = [f'<svg class="dataflow" xmlns="http://www.w3.org/2000/svg" width="{w:.0f}" '
           f'height="{h:.0f}" viewBox="0 0 {w:.0f} {h:.0f}">',
           '<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" '
           'markerHeight="7" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#6b7280"/>'
           "</marker></defs>"]
    for name in dict.fromkeys(n.cluster for n in nodes if n.cluster):
        members = [n for n in nodes if n.cluster == name]
        x0 = min(n.x for n in members) - 8
        y0 = min(n.y for n in members) - 22
        x1 = max(n.x for n in members) + NODE_W + 8
        y1 = max(n.y for n in members) + NODE_H + 8
        out.append(f'<g class="kernel"><rect x="{x0:.0f}" y="{y0:.0f}" width="{x1 - x0:.0f}" '
                   f'height="{y1 - y0:.0f}" rx="8"/><text x="{x0 + 8:.0f}" y="{y0 + 14:.0f}">'
                   f"kernel {escape(name)}</text></g>")
    for node in nodes:
        for p in node.preds:
            a, b = nodes[p], node
            x0, y0, x1, y1 = a.x + NODE_W / 2, a.y + NODE_H, b.x + NODE_W / 2, b.y
            mid = (y0 + y1) / 2
            # an edge past a layer bows sideways, off the column of nodes it passes
            bow = (GAP_X * 0.6 if x1 >= x0 else -GAP_X * 0.6) if b.layer - a.layer > 1 else 0
            out.append(f'<path class="edge" d="M{x0:.0f},{y0:.0f} C{x0 + bow:.0f},{mid:.0f} '
                       f'{x1 + bow:.0f},{mid:.0f} {x1:.0f},{y1 - 1:.0f}" '
                       'marker-end="url(#arrow)"/>')
    for node in nodes:
        cls = "node arg" if node.layer == 0 and not node.preds and node.src is None else "node"
        link = f' data-src="{node.src}"' if node.src is not None else ""
        out.append(f'<g class="{cls}"{link}><rect x="{node.x:.0f}" y="{node.y:.0f}" '
                   f'width="{NODE_W}" height="{NODE_H}" rx="5"/>'
                   f'<text x="{node.x + NODE_W / 2:.0f}" y="{node.y + 15:.0f}">'
                   f"{escape(_fit(node.label, 17))}</text>"
                   f'<text class="type" x="{node.x + NODE_W / 2:.0f}" y="{node.y + 29:.0f}">'
                   f"{escape(_fit(node.detail, 20))}</text>"
                   f"<title>{escape(node.label)} : {escape(node.detail)}"
                   f"{f' (line {node.src})' if node.src else ''}</title></g>")
    out.append("</svg>")
    return "".join(out)


__all__ = ["svg"]
