"""`SchemaCallsProvider`: a test model that calls each offered tool once, with arguments made
from the tool's own JSON schema, and then ends the turn with text (as pydantic-ai's `TestModel`).

It exercises a tool set without writing a script: a new tool, an MCP server's tools or a plugin's
are called with arguments that are valid by construction, so a test sees that each one is
offered, accepted and answered::

    provider = SchemaCallsProvider()                      # every offered tool
    provider = SchemaCallsProvider(call_tools=["grep"])   # only these

The first response of a turn calls the chosen tools (all in one response, in the order offered);
once their results come back, the answer is `final_text`, or by default a JSON object mapping each
tool called to its result. The arguments are deterministic: the required properties only (with
`optional=True`, every property), a string is ``"a"`` (as long as `minLength` asks), a number 1 or
the nearest value its bounds allow, an array `minItems` items, an enum its first member. It is a
`FunctionProvider`, so `requests` keeps what it was sent.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from bubu.messages import (
    JSON,
    AssistantPart,
    ModelRequest,
    TextPart,
    ToolCallPart,
    ToolResultsMessage,
    UserMessage,
)
from bubu.providers.function import FunctionProvider, Reply

MAX_DEPTH = 8
"""How deep nested objects and arrays are filled before an empty one stands in."""


def arguments_for(schema: dict[str, JSON], *, optional: bool = False) -> dict[str, JSON]:
    """Arguments valid against the object `schema` of a tool (see the module docstring)."""
    value = _value(schema, schema, optional=optional, depth=0)
    return value if isinstance(value, dict) else {}


def _resolve(node: dict[str, JSON], root: dict[str, JSON]) -> dict[str, JSON]:
    """`node` with a local `$ref` (``#/$defs/Name``) followed."""
    seen = 0
    while isinstance(ref := node.get("$ref"), str) and ref.startswith("#/") and seen < 32:
        target: JSON = root
        for key in ref[2:].split("/"):
            target = target.get(key, {}) if isinstance(target, dict) else {}
        node = target if isinstance(target, dict) else {}
        seen += 1
    return node


def _value(node: dict[str, JSON], root: dict[str, JSON], *, optional: bool, depth: int) -> JSON:
    node = _resolve(node, root)
    if "const" in node:
        return node["const"]
    enum = node.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    for key in ("anyOf", "oneOf", "allOf"):
        options = node.get(key)
        if isinstance(options, list) and options:
            # The first alternative that is not `null` (a field that is "X or nothing" gets an X).
            chosen = next(
                (o for o in options if isinstance(o, dict) and o.get("type") != "null"), options[0]
            )
            return _value(
                chosen if isinstance(chosen, dict) else {}, root, optional=optional, depth=depth
            )
    kind = node.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in node):
        return _object(node, root, optional=optional, depth=depth)
    if kind == "array":
        items = node.get("items")
        count = node.get("minItems")
        n = count if isinstance(count, int) else 0
        if depth >= MAX_DEPTH or not isinstance(items, dict):
            return []
        return [_value(items, root, optional=optional, depth=depth + 1) for _ in range(n)]
    if kind in ("integer", "number"):
        return _number(node, integer=kind == "integer")
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    length = node.get("minLength")
    return "a" * max(1, length if isinstance(length, int) else 1)


def _object(node: dict[str, JSON], root: dict[str, JSON], *, optional: bool, depth: int) -> JSON:
    props = node.get("properties")
    if not isinstance(props, dict) or depth >= MAX_DEPTH:
        return {}
    required = node.get("required")
    wanted = set(required) if isinstance(required, list) else set()
    return {
        name: _value(sub if isinstance(sub, dict) else {}, root, optional=optional, depth=depth + 1)
        for name, sub in props.items()
        if optional or name in wanted
    }


def _number(node: dict[str, JSON], *, integer: bool) -> JSON:
    """1 (counts, offsets and timeouts take it where 0 means nothing), or the nearest value the
    bounds allow."""
    low, above, high = node.get("minimum"), node.get("exclusiveMinimum"), node.get("maximum")
    value: float = 1
    if isinstance(low, int | float) and value < low:
        value = low
    if isinstance(above, int | float) and value <= above:
        value = above + (1 if integer else 0.5)
    if isinstance(high, int | float) and value > high:
        value = high
    return int(value) if integer else float(value)


@dataclass
class _Caller:
    call_tools: Sequence[str] | None
    optional: bool
    final_text: str | None

    def __call__(self, request: ModelRequest) -> Reply:
        last = request.messages[-1] if request.messages else None
        if isinstance(last, ToolResultsMessage):
            return self._final(last)
        if not isinstance(last, UserMessage) and last is not None:
            return self.final_text or "{}"
        calls = self._calls(request)
        return calls if calls else (self.final_text or "{}")

    def _calls(self, request: ModelRequest) -> list[AssistantPart]:
        chosen = self.call_tools
        return [
            ToolCallPart(
                call_id=f"schema_{request.ordinal}_{i}",
                name=spec.name,
                arguments=arguments_for(spec.parameters, optional=self.optional),
            )
            for i, spec in enumerate(t for t in request.tools if chosen is None or t.name in chosen)
        ]

    def _final(self, results: ToolResultsMessage) -> Reply:
        if self.final_text is not None:
            return TextPart(text=self.final_text)
        return json.dumps({r.name: r.content for r in results.results}, ensure_ascii=False)


class SchemaCallsProvider(FunctionProvider):
    """A `FunctionProvider` that calls each offered tool (or each of `call_tools`) once with
    arguments from its schema, then answers `final_text` (see the module docstring)."""

    def __init__(
        self,
        call_tools: Iterable[str] | None = None,
        *,
        optional: bool = False,
        final_text: str | None = None,
        spec: str = "function:schema-calls",
        context_window: int = 200_000,
    ) -> None:
        chosen = None if call_tools is None else tuple(call_tools)
        super().__init__(
            _Caller(chosen, optional, final_text), spec=spec, context_window=context_window
        )


__all__ = ["SchemaCallsProvider", "arguments_for"]
