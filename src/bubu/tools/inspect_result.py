"""inspect_result{handle}: the structure of an offloaded result, so the model can look before it
pages — its size, lines, detected format, for JSON the top-level keys and array lengths, for logs
the lines per level. The answer is always small (well below the offload threshold)."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Literal

from bubu.toolfacts import ToolFacts
from bubu.tools.base import ToolContext, ToolResult
from bubu.tools.decorator import tool
from bubu.tools.results import Handle, _blob, _handle, line_count
from bubu.tools.schema import Arguments
from bubu.tools.workspace import decode

Format = Literal["empty", "binary", "json", "jsonl", "csv", "log", "text"]

MAX_KEYS = 40
"""Top-level keys (or JSONL keys) listed; the rest are counted."""

LEVELS = ("FATAL", "CRITICAL", "ERROR", "WARNING", "WARN", "INFO", "DEBUG", "TRACE")
_LEVEL = re.compile(r"\b(FATAL|CRITICAL|ERROR|WARNING|WARN|INFO|DEBUG|TRACE)\b", re.IGNORECASE)
_SAMPLE_LINES = 2000


def detect(data: bytes) -> Format:
    """The format of `data`: by parsing where that is cheap and certain, else by its lines."""
    if not data.strip():
        return "empty"
    if b"\0" in data[:8192]:
        return "binary"
    text = decode(data)
    stripped = text.lstrip()
    if stripped[:1] in ("{", "["):
        try:
            json.loads(text)
            return "json"
        except ValueError:
            pass
    lines = [ln for ln in text.splitlines()[:_SAMPLE_LINES] if ln.strip()]
    if lines and all(ln.lstrip().startswith("{") for ln in lines[:50]):
        try:
            for ln in lines[:50]:
                json.loads(ln)
            return "jsonl"
        except ValueError:
            pass
    if sum(1 for ln in lines if _LEVEL.search(ln)) >= max(1, len(lines) // 5):
        return "log"
    if len(lines) >= 2:
        commas = {ln.count(",") for ln in lines[:50]}
        if len(commas) == 1 and next(iter(commas)) >= 1:
            return "csv"
    return "text"


def _shape(value: object) -> str:
    if isinstance(value, list):
        return f"array of {len(value):,}"
    if isinstance(value, dict):
        return f"object of {len(value):,} keys"
    if isinstance(value, str):
        return f"string of {len(value):,} chars"
    return type(value).__name__ if value is not None else "null"


def describe(data: bytes) -> list[str]:
    """Lines describing the structure of `data`."""
    fmt = detect(data)
    out = [f"{len(data):,} bytes, {line_count(data):,} lines, format: {fmt}"]
    if fmt == "json":
        value = json.loads(decode(data))
        if isinstance(value, dict):
            out.append(f"top level: object of {len(value):,} keys")
            for k, v in list(value.items())[:MAX_KEYS]:
                out.append(f"  {k!s:.80}: {_shape(v)}")
            if len(value) > MAX_KEYS:
                out.append(f"  … {len(value) - MAX_KEYS:,} more keys")
        else:
            out.append(f"top level: {_shape(value)}")
            if isinstance(value, list) and value and isinstance(value[0], dict):
                out.append("first item keys: " + ", ".join(list(map(str, value[0]))[:MAX_KEYS]))
    elif fmt == "jsonl":
        keys: Counter[str] = Counter()
        rows = 0
        for ln in decode(data).splitlines():
            if not ln.strip():
                continue
            rows += 1
            try:
                item = json.loads(ln)
            except ValueError:
                continue
            if isinstance(item, dict):
                keys.update(map(str, item))
        out.append(
            f"{rows:,} JSON lines; keys (in how many lines): "
            + ", ".join(f"{k} ({n:,})" for k, n in keys.most_common(MAX_KEYS))
        )
    elif fmt == "log":
        levels: Counter[str] = Counter()
        for ln in decode(data).splitlines():
            m = _LEVEL.search(ln)
            levels[m.group(1).upper() if m else "(no level)"] += 1
        out.append(
            "lines per level: "
            + ", ".join(f"{lv} {levels[lv]:,}" for lv in (*LEVELS, "(no level)") if levels[lv])
        )
    elif fmt == "csv":
        header = decode(data).splitlines()[0]
        out.append(f"header: {header[:300]}")
    return out


class InspectResultArgs(Arguments):
    """The arguments of inspect_result."""

    handle: Handle


@tool(
    effect="read_only",
    name="inspect_result",
    facts=ToolFacts(headline="handle"),
    description=(
        "Describe a large tool result that was replaced by a placeholder, before paging through "
        "it: bytes, lines, detected format (json, jsonl, csv, log, text, binary), for JSON its "
        "top-level keys and array lengths, for logs the number of lines per level. `handle` is "
        "the sha-256 shown in the placeholder (at least its first 12 hex digits)."
    ),
)
def inspect_result(args: InspectResultArgs, ctx: ToolContext) -> ToolResult:
    """inspect_result{handle}: the structure of an offloaded result."""
    handle = _handle(args.handle)
    data = _blob(ctx, handle)
    lines = [f"result {handle}:", *describe(data)]
    lines.append(
        f'Page with read_result{{"handle": "{handle}", "offset": 1}} or search with '
        f'search_result{{"handle": "{handle}", "pattern": "…"}}.'
    )
    if detect(data) in ("json", "jsonl", "csv"):
        lines.append(
            f'Ask for items with query_result{{"handle": "{handle}", "query": "…"}} (JMESPath).'
        )
    return ToolResult(output="\n".join(lines)[:6000])
