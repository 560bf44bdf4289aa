"""query_result{handle, query?, row?, rows?}: ask a structured offloaded result for items.

A JSON result is one value; NDJSON (JSON lines) is the array of its lines; CSV is the array of
its rows as objects keyed by the header. `query` is a JMESPath expression (the maintained
`jmespath` library: ``items[?status=='failed'].id``, ``length(@)``, ``keys(@)``) evaluated on
that value; without one, an array is paged by row. Answers are JSON, bounded like a page of
read_result, and say how to narrow or go on.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Annotated, Any

import jmespath
from jmespath.exceptions import JMESPathError
from msgspec import UNSET, Meta, UnsetType

from bubu.errors import ToolError
from bubu.toolfacts import ToolFacts
from bubu.tools.base import ToolContext, ToolResult
from bubu.tools.decorator import tool
from bubu.tools.inspect_result import detect
from bubu.tools.results import PAGE_BYTES, Handle, _blob, _handle
from bubu.tools.schema import Arguments, given
from bubu.tools.workspace import decode

ROWS = 20
"""Rows one answer shows when no `rows` is given."""


def structured(data: bytes) -> tuple[str, Any]:
    """The format of `data` and its value (JSON; NDJSON and CSV as arrays), or ToolError."""
    fmt = detect(data)
    text = decode(data)
    if fmt == "json":
        return fmt, json.loads(text)
    if fmt == "jsonl":
        items = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    items.append(json.loads(line))
                except ValueError as e:
                    raise ToolError(f"line {n:,} of the JSON lines is not JSON ({e})") from None
        return fmt, items
    if fmt == "csv":
        return fmt, list(csv.DictReader(io.StringIO(text)))
    raise ToolError(
        f"the result is not JSON, JSON lines or CSV (its format: {fmt}); read it with "
        "read_result or search it with search_result"
    )


class QueryResultArgs(Arguments):
    """The arguments of query_result."""

    handle: Handle
    query: Annotated[str | UnsetType, "A JMESPath expression."] = UNSET
    row: Annotated[Annotated[int, Meta(ge=1)], "First row."] = 1
    rows: Annotated[Annotated[int, Meta(ge=1, le=1000)], "How many rows."] = ROWS


@tool(
    effect="read_only",
    name="query_result",
    facts=ToolFacts(headline="handle"),
    description=(
        "Ask a large JSON, JSON-lines or CSV result (behind a placeholder) for items. JSON lines "
        "and CSV rows are an array. `query`: JMESPath (e.g. `items[?status=='failed'].id`, "
        "`keys(@)`); without it an array is paged by `row` (1-based) and `rows`."
    ),
)
def query_result(args: QueryResultArgs, ctx: ToolContext) -> ToolResult:
    """query_result{handle, query?, row?, rows?}: items of a structured offloaded result."""
    handle = _handle(args.handle)
    fmt, value = structured(_blob(ctx, handle))
    query = given(args.query)
    if query is not None:
        try:
            value = jmespath.search(query, value)
        except JMESPathError as e:
            said = " ".join(str(e).split())
            raise ToolError(f"the query {query!r} is not JMESPath ({said})") from None
    where = f"query {query!r}" if query is not None else "the whole value"
    if isinstance(value, list):
        total = len(value)
        first = min(args.row, max(total, 1))
        shown = value[first - 1 : first - 1 + args.rows]
        text, cut = _bounded(shown)
        last = first - 1 + (cut or len(shown))
        head = f"result {handle} ({fmt}), {where}: rows {first:,}–{last:,} of {total:,}"
        foot = (
            f'next rows: query_result{{"handle": "{handle}"'
            + (f', "query": {json.dumps(query)}' if query is not None else "")
            + f', "row": {last + 1}}}'
            if last < total
            else "(last row)"
        )
        return ToolResult(output="\n".join([head, text, foot]))
    text, cut = _bounded(value)
    head = f"result {handle} ({fmt}), {where}:"
    foot = (
        "(cut: the answer is longer than a page; narrow the query, e.g. keys(@) or a path)"
        if cut
        else "(whole answer)"
    )
    return ToolResult(output="\n".join([head, text, foot]))


def _bounded(value: Any) -> tuple[str, int]:
    """`value` as JSON within a page: (text, 0) whole, else (text, rows kept) for an array, or
    (a cut text, 1) for anything else."""
    text = json.dumps(value, ensure_ascii=False, indent=1, default=str)
    if len(text.encode()) <= PAGE_BYTES:
        return text, 0
    if isinstance(value, list):
        kept = len(value)
        while kept > 1:
            kept //= 2
            text = json.dumps(value[:kept], ensure_ascii=False, indent=1, default=str)
            if len(text.encode()) <= PAGE_BYTES:
                return text, kept
    cut = text.encode()[:PAGE_BYTES].decode("utf-8", errors="ignore")
    return cut + " …", 1


__all__ = ["QueryResultArgs", "query_result", "structured"]
