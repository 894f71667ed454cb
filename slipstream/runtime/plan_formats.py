"""The physical plan in the formats ``slipstream explain`` prints: text, JSON, mermaid and dot.

``text`` is :meth:`JobGraph.explain`. ``json`` is one document (:func:`plan_document`)::

    {"format": "slipstream-plan", "version": 1, "mode": "STREAMING", "batch_engine": "polars",
     "operators": [{"id", "name", "uid", "kind", "parallelism", "max_parallelism", "task",
                    "scope", "attributes": {"internal_sorter", "output_on_eof", "output_on_checkpoint"},
                    "batch": {"sorted_backlog": bool, "engine": str | null,
                              "path": "sorted" | "vectorised" | "streamed"}, "notes": [str]}],
     "tasks": [{"id", "name", "parallelism", "operators": [operator ids]}],
     "edges": [{"source", "target", "input_index", "partitioning", "kind": "PIPELINED" | "BLOCKING" |
                "FEEDBACK", "side_output": str | null, "chained": bool}],
     "loop_scopes": [{"scope", "level", "parent", "operators": [operator ids]}]}

Operators are the plan's stream nodes (``kind`` the transformation's kind without its suffix);
a chained edge joins two operators of one task by a direct call. The mermaid and dot pictures
draw the same document: operators as boxes, loop scopes as nested clusters, BLOCKING edges
thick and FEEDBACK edges dashed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from slipstream.operators.backlog_path import BacklogPath
from slipstream.runtime.job_graph import JobGraph, StreamNode, node_notes

FORMATS = ("text", "json", "mermaid", "dot")


def _operator(node: StreamNode, graph: JobGraph) -> dict[str, Any]:
    attributes = node.transformation.get_operator_attributes()
    path = node.backlog_path
    sorted_backlog = path is not None and path is not BacklogPath.STREAMED
    return {"id": node.id, "name": node.name, "uid": node.uid,
            "kind": type(node.transformation).__name__.removesuffix("Transformation"),
            "parallelism": node.parallelism, "max_parallelism": node.max_parallelism,
            "task": graph.vertex_of[node].id, "scope": str(node.transformation.scope),
            "attributes": {"internal_sorter": sorted_backlog, "output_on_eof": attributes.is_output_on_eof(),
                           "output_on_checkpoint": attributes.is_output_on_checkpoint()},
            "batch": {"sorted_backlog": sorted_backlog, "engine": graph.batch_engine if sorted_backlog else None,
                      "path": None if path is None else path.value},
            "notes": node_notes(node, graph.batch_engine)}


def plan_document(graph: JobGraph) -> dict[str, Any]:
    """The plan as a JSON-ready document (its structure is in this module's docstring)."""
    nodes = [node for vertex in graph.vertices for node in vertex.nodes]
    scopes: dict[str, dict[str, Any]] = {}
    for node in nodes:
        scope = node.transformation.scope
        for level in range(1, scope.get_level() + 1):
            outer = scope.get_context_for_level(level)
            scopes.setdefault(str(outer), {"scope": str(outer), "level": level,
                                           "parent": str(outer.unnest()), "operators": []})
        if scope.get_level():
            scopes[str(scope)]["operators"].append(node.id)
    return {
        "format": "slipstream-plan", "version": 1, "mode": getattr(graph.mode, "name", "STREAMING"),
        "batch_engine": graph.batch_engine,
        "operators": [_operator(node, graph) for node in nodes],
        "tasks": [{"id": vertex.id, "name": vertex.name, "parallelism": vertex.parallelism,
                   "operators": [node.id for node in vertex.nodes]} for vertex in graph.vertices],
        "edges": [{"source": edge.source.id, "target": edge.target.id, "input_index": edge.input_index,
                   "partitioning": edge.partitioning.value, "kind": edge.kind.value,
                   "side_output": edge.side_tag.tag_id if edge.side_tag else None,
                   "chained": graph.vertex_of[edge.source] is graph.vertex_of[edge.target]}
                  for node in nodes for edge in node.out_edges],
        "loop_scopes": sorted(scopes.values(), key=lambda s: (s["level"], s["scope"])),
    }


def _label(operator: dict[str, Any]) -> str:
    batch = f", sorted backlog on {operator['batch']['engine']}" if operator["batch"]["sorted_backlog"] else ""
    return f"{operator['name']} (p={operator['parallelism']}{batch})"


def _edge_label(edge: dict[str, Any]) -> str:
    side = f" side '{edge['side_output']}'" if edge["side_output"] else ""
    return f"{edge['partitioning']} {edge['kind']}{side}" + (" chained" if edge["chained"] else "")


def _by_scope(document: dict[str, Any]) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[str]]]:
    """Operators by their scope, and each scope's inner scopes ("root" is the outermost)."""
    members: dict[str, list[dict[str, Any]]] = {}
    for operator in document["operators"]:
        members.setdefault(operator["scope"], []).append(operator)
    children: dict[str, list[str]] = {}
    for scope in document["loop_scopes"]:
        children.setdefault(scope["parent"], []).append(scope["scope"])
    return members, children


def _nested(document: dict[str, Any], operator: Callable[[dict[str, Any]], str],
            opening: Callable[[str], list[str]], closing: str) -> list[str]:
    """Lines of the operators, loop scopes enclosing theirs (``opening`` lines, inner lines, ``closing``)."""
    members, children = _by_scope(document)
    lines: list[str] = []

    def visit(scope: str, indent: str) -> None:
        lines.extend(indent + operator(op) for op in members.get(scope, []))
        for inner in children.get(scope, []):
            lines.extend(indent + line for line in opening(inner))
            visit(inner, indent + "  ")
            lines.append(indent + closing)

    visit("root", "  ")
    return lines


def _quote_mermaid(text: str) -> str:
    return text.replace('"', "#quot;")


def to_mermaid(document: dict[str, Any]) -> str:
    """A mermaid flowchart of the plan document."""
    arrows = {"PIPELINED": "-->", "BLOCKING": "==>", "FEEDBACK": "-.->"}
    return "\n".join(
        ["flowchart LR"]
        + _nested(document, lambda op: f'op{op["id"]}["{_quote_mermaid(_label(op))}"]',
                  lambda scope: [f'subgraph scope{scope.replace("/", "_")} ["loop scope {scope}"]'], "end")
        + [f'  op{edge["source"]} {arrows[edge["kind"]]}|"{_quote_mermaid(_edge_label(edge))}"| op{edge["target"]}'
           for edge in document["edges"]])


def _quote_dot(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_dot(document: dict[str, Any]) -> str:
    """A Graphviz dot digraph of the plan document."""
    styles = {"PIPELINED": "solid", "BLOCKING": "bold", "FEEDBACK": "dashed"}
    return "\n".join(
        ["digraph plan {", "  rankdir=LR;", "  node [shape=box];"]
        + _nested(document, lambda op: f"op{op['id']} [label={_quote_dot(_label(op))}];",
                  lambda scope: [f"subgraph cluster_{scope.replace('/', '_')} {{",
                                 f"  label={_quote_dot('loop scope ' + scope)};"], "}")
        + [f"  op{edge['source']} -> op{edge['target']} [label={_quote_dot(_edge_label(edge))}, "
           f"style={styles[edge['kind']]}];" for edge in document["edges"]]
        + ["}"])


def render_plan(graph: JobGraph, format: str = "text") -> str:
    """The plan in ``format``: one of :data:`FORMATS`."""
    if format == "text":
        return graph.explain()
    document = plan_document(graph)
    if format == "json":
        return json.dumps(document, indent=1)
    if format == "mermaid":
        return to_mermaid(document)
    if format == "dot":
        return to_dot(document)
    raise ValueError(f"unknown plan format {format!r}: expected one of {', '.join(FORMATS)}")


__all__ = ["FORMATS", "plan_document", "render_plan", "to_dot", "to_mermaid"]
