"""The plan as an SVG picture, drawn from the plan document (:func:`~slipstream.runtime.plan_formats.plan_document`).

Operators are boxes placed in columns by their distance from the sources (feedback edges
ignored), with their parallelism and, for those that run their backlog as sorted batch work,
the engine. Edges are arrows labelled with their partitioning and kind: BLOCKING thick,
FEEDBACK dashed and drawn back below the graph, chained ones (a direct call inside a task)
dotted. Loop scopes and iteration bodies are boxes around their operators, nested by level.
The web view (:mod:`slipstream.runtime.web_ui`) shows this picture and fills in each
operator's live figures: every box has an element with id ``live-<uid>`` for them.
No script or style sheet from outside is needed to show it.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Any

BOX_W, BOX_H = 200, 74
COLUMN, ROW = 330, 112
MARGIN = 40
SCOPE_PAD = 16


@dataclass(frozen=True)
class Box:
    x: float
    y: float
    w: float = BOX_W
    h: float = BOX_H


def columns(document: dict[str, Any]) -> dict[int, int]:
    """Each operator's column: the longest path to it from a source, over non-feedback edges."""
    inputs: dict[int, list[int]] = {op["id"]: [] for op in document["operators"]}
    for edge in document["edges"]:
        if edge["kind"] != "FEEDBACK":
            inputs[edge["target"]].append(edge["source"])
    column: dict[int, int] = {}

    def depth(node: int, path: frozenset[int]) -> int:
        if node not in column:
            column[node] = 1 + max((depth(s, path | {node}) for s in inputs[node] if s not in path), default=-1)
        return column[node]

    for node in inputs:
        depth(node, frozenset())
    return column


def layout(document: dict[str, Any]) -> dict[int, Box]:
    """Where each operator's box goes: its column, and a row in a band of rows of its own scope
    (scopes in nesting order, so an inner scope's band lies inside its outer scope's box)."""
    column = columns(document)
    by_scope: dict[str, list[int]] = {}
    for op in document["operators"]:
        by_scope.setdefault(op["scope"], []).append(op["id"])
    placed: dict[int, Box] = {}
    band = 0
    for scope in sorted(by_scope, key=lambda name: name.split("/")):
        rows: dict[int, int] = {}
        for node in sorted(by_scope[scope], key=lambda i: (column[i], i)):
            row = rows[column[node]] = rows.get(column[node], -1) + 1
            placed[node] = Box(MARGIN + SCOPE_PAD * 3 + column[node] * COLUMN,
                               MARGIN + SCOPE_PAD * 3 + (band + row) * ROW)
        band += max(rows.values()) + 1
    return placed


def _scope_boxes(document: dict[str, Any], boxes: dict[int, Box]) -> list[tuple[dict[str, Any], Box]]:
    """A box around each loop scope's operators (inner scopes included), outer scopes drawn larger."""
    by_scope: dict[str, list[int]] = {}
    for op in document["operators"]:
        by_scope.setdefault(op["scope"], []).append(op["id"])
    drawn = []
    deepest = max((s["level"] for s in document["loop_scopes"]), default=0)
    for scope in document["loop_scopes"]:
        members = [i for name, ids in by_scope.items()
                   if name == scope["scope"] or name.startswith(scope["scope"] + "/") for i in ids]
        if not members:
            continue
        pad = SCOPE_PAD * (deepest - scope["level"] + 1) + 6
        left = min(boxes[i].x for i in members) - pad
        top = min(boxes[i].y for i in members) - pad - 14
        right = max(boxes[i].x + boxes[i].w for i in members) + pad
        bottom = max(boxes[i].y + boxes[i].h for i in members) + pad
        drawn.append((scope, Box(left, top, right - left, bottom - top)))
    return drawn


def _text(x: float, y: float, text: str, css: str, **attributes: str) -> str:
    extra = "".join(f' {name.replace("_", "-")}="{escape(value)}"' for name, value in attributes.items())
    return f'<text x="{x:.0f}" y="{y:.0f}" class="{css}"{extra}>{escape(text)}</text>'


def _operator(op: dict[str, Any], box: Box) -> str:
    sorted_backlog = op["batch"]["sorted_backlog"]
    css = "operator sorted" if sorted_backlog else "operator"
    detail = f"p={op['parallelism']} · {op['kind']}"
    badge = f"sorted backlog on {op['batch']['engine']}" if sorted_backlog else ""
    return "".join([
        f'<g class="{css}" id="op-{escape(op["uid"])}" data-uid="{escape(op["uid"])}">',
        f'<title>{escape(op["name"])} (uid {escape(op["uid"])}, task {op["task"]})</title>',
        f'<rect x="{box.x:.0f}" y="{box.y:.0f}" width="{box.w}" height="{box.h}" rx="6"/>',
        _text(box.x + 8, box.y + 17, _shorten(op["name"], 28), "name"),
        _text(box.x + 8, box.y + 33, detail, "detail"),
        _text(box.x + 8, box.y + 48, badge, "badge") if badge else "",
        _text(box.x + 8, box.y + 66, "", "live", id=f"live-{op['uid']}"),
        "</g>"])


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _edge(edge: dict[str, Any], boxes: dict[int, Box], bottom: float, index: int) -> str:
    source, target = boxes[edge["source"]], boxes[edge["target"]]
    label = f"{edge['partitioning']} {edge['kind']}" + (f" side '{edge['side_output']}'" if edge["side_output"] else "")
    css = "edge " + edge["kind"].lower() + (" chained" if edge["chained"] else "")
    x1, y1 = source.x + source.w, source.y + source.h / 2
    x2, y2 = target.x, target.y + target.h / 2
    if edge["kind"] == "FEEDBACK":  # back to the head, below everything
        low = bottom + 18 + 14 * index
        path = f"M{x1 - source.w / 2:.0f},{source.y + source.h:.0f} L{x1 - source.w / 2:.0f},{low:.0f} " \
               f"L{x2 + target.w / 2:.0f},{low:.0f} L{x2 + target.w / 2:.0f},{target.y + target.h:.0f}"
        lx, ly = (x1 + x2) / 2 - source.w / 4, low - 4
    else:
        middle = (x1 + x2) / 2
        path = f"M{x1:.0f},{y1:.0f} C{middle:.0f},{y1:.0f} {middle:.0f},{y2:.0f} {x2:.0f},{y2:.0f}"
        lx, ly = middle, (y1 + y2) / 2 - 5
    return (f'<g class="{css}" data-kind="{edge["kind"]}"><path d="{path}" marker-end="url(#arrow)"/>'
            + _text(lx, ly, label, "edge-label", text_anchor="middle") + "</g>")


def plan_svg(document: dict[str, Any]) -> str:
    """The plan document as an SVG element (see the module's docstring)."""
    boxes = layout(document)
    scopes = _scope_boxes(document, boxes)
    bottom = max((b.y + b.h for b in boxes.values()), default=MARGIN)
    bottom = max([bottom] + [b.y + b.h for _, b in scopes])
    feedback = [e for e in document["edges"] if e["kind"] == "FEEDBACK"]
    width = max((b.x + b.w for b in boxes.values()), default=MARGIN) + MARGIN + SCOPE_PAD * 3
    height = bottom + 30 + 14 * len(feedback) + MARGIN
    kinds = {op["id"]: op["kind"] for op in document["operators"]}
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" id="plan" width="{width:.0f}" height="{height:.0f}" '
             f'viewBox="0 0 {width:.0f} {height:.0f}" preserveAspectRatio="xMinYMin meet" role="img" '
             f'aria-label="job graph">',
             '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="9" markerHeight="9" '
             'markerUnits="userSpaceOnUse" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z"/></marker></defs>']
    for scope, box in scopes:
        what = "iteration body" if any(kinds[i] == "IterationHead" for i in scope["operators"]) else "loop body"
        parts.append(f'<g class="scope" data-scope="{escape(scope["scope"])}"><rect x="{box.x:.0f}" '
                     f'y="{box.y:.0f}" width="{box.w:.0f}" height="{box.h:.0f}" rx="10"/>'
                     + _text(box.x + 10, box.y + 16, f"{what} · scope {scope['scope']}", "scope-label") + "</g>")
    edges = document["edges"]
    parts.extend(_edge(edge, boxes, bottom, feedback.index(edge) if edge in feedback else 0) for edge in edges)
    parts.extend(_operator(op, boxes[op["id"]]) for op in document["operators"])
    parts.append("</svg>")
    return "\n".join(parts)


__all__ = ["columns", "layout", "plan_svg"]
