"""The body of `bubu context` and what it prints, free of click: the click command
(`bubu.cli.contextcmd`) and the fast path (`bubu.cli.fast`) both run it, so both print the same.
It loads neither the tools nor the providers when the host offers the built-in tools alone
(`bubu.toolspecs`) and the session's model is the scripted one or its window is recorded."""

from __future__ import annotations

from collections import Counter
from typing import Any

import msgspec

from bubu.cli.core import Ctx, echo, emit_json
from bubu.cli.term import one_line
from bubu.events import InstructionFile
from bubu.messages import AssistantMessage, ToolResultsMessage, UserMessage
from bubu.projections.context import diagnose
from bubu.projections.instructions import MAX_FILE_BYTES, InstructionsFold, directory_of
from bubu.windowfacts import Window


def context(ctx: Ctx, session: str, as_json: bool, context_window: int | None) -> None:
    """Show the next model request of SESSION and what happened to each event."""
    from bubu.engine.inspect import inspect_request

    store = ctx.store
    info = store.session(session)
    seen = inspect_request(store, info, context_window=context_window)
    request, digest, estimate = seen.next.request, seen.next.digest, seen.next.estimate
    spec, window = seen.model, seen.window
    calibrated = int(estimate * seen.calibration)
    rows = diagnose(seen.records, seen.fold.context)
    cp = seen.fold.context.checkpoint
    out = {
        "session": info.id,
        "model": spec,
        "request_digest": digest,
        "estimated_tokens": estimate,
        "calibrated_tokens": calibrated,
        "calibration": round(seen.calibration, 4),
        "window": window,
        "window_source": seen.window_source,
        "budget": seen.budget,
        "checkpoint": None
        if cp is None
        else {"key": cp.key, "watermark": cp.watermark, "source_digest": cp.source_digest},
        "project_instructions": instruction_rows(seen.instructions),
        "system": request.system,
        "tools": [t.name for t in request.tools],
        "messages": msgspec.to_builtins(request.messages),
        "events": [{"seq": s, "kind": k, "inclusion": inc, "why": why} for s, k, inc, why in rows],
    }
    if as_json:
        emit_json(out)
        return
    counts = Counter(inc for _, _, inc, _ in rows)
    echo(f"{info.id} · next request {digest[:16]} · ~{calibrated:,} of {out['budget']:,} tokens")
    echo(f"window: {Window(window, seen.window_source).describe()}")
    if cp is not None:
        echo(f"checkpoint {_short(cp.key, 80)} covers events 1–{cp.watermark}")
    echo("events: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    echo(f"\n[system + {len(request.tools)} tools: stable prefix, {len(request.system):,} chars]")
    for row in out["project_instructions"]:
        echo(instruction_line(row))
    for m in request.messages:
        if isinstance(m, UserMessage):
            echo(f"\nUSER  {_short(m.text)}{_images(m.images)}")
        elif isinstance(m, AssistantMessage):
            echo(f"\nMODEL {' · '.join(_part(p) for p in m.parts)}")
        elif isinstance(m, ToolResultsMessage):
            for r in m.results:
                echo(f"  ← {_short(r.name, 40)}: {_short(r.content, 90)}{_images(r.images)}")


def _images(images: tuple[Any, ...]) -> str:
    """What images a message shows the model, e.g. `` [+1 image, 48,210 bytes]``."""
    if not images:
        return ""
    size = sum(len(i.data) for i in images)
    return f" [+{len(images)} image{'s' if len(images) > 1 else ''}, {size:,} bytes]"


def instruction_rows(fold: InstructionsFold) -> list[dict[str, Any]]:
    """The project instruction files the next request holds: those of the stable prefix, then
    the latest one of each directory given in the history (with the seq of its note)."""

    def row(f: InstructionFile, where: str, seq: int | None) -> dict[str, Any]:
        return {
            "path": f.path,
            "sha256": f.sha256,
            "size": f.size,
            "truncated": f.truncated,
            "skipped": f.skipped,
            "where": where,
            "seq": seq,
            "given": fold.enabled,
        }

    rows = [row(f, "prefix", fold.seqs.get(directory_of(f.path))) for f in fold.prefix]
    for d in fold.directories:
        if fold.where.get(d) == "history":
            rows.append(row(fold.current[d], "history", fold.seqs[d]))
    return rows


def instruction_line(row: dict[str, Any]) -> str:
    """One instruction file as `bubu context` prints it."""
    where = "stable prefix" if row["where"] == "prefix" else f"history, seq {row['seq']}"
    if not row["given"]:
        where += "; not given: --no-project-instructions"
    if not row["sha256"]:
        return f"[project instructions: {row['path']} removed ({where})]"
    if row["skipped"]:
        return f"[project instructions: {row['path']} not given: {row['skipped']} ({where})]"
    cut = f", cut to {MAX_FILE_BYTES:,}" if row["truncated"] else ""
    return (
        f"[project instructions: {row['path']} sha256 {row['sha256'][:12]} "
        f"{row['size']:,} bytes{cut} ({where})]"
    )


def _short(text: str, n: int = 140) -> str:
    return one_line(text, n)


def _part(p: Any) -> str:
    kind = getattr(p, "kind", "")
    if kind == "tool_call":
        return f"call {_short(p.name, 40)}"
    if kind == "thinking":
        return "(thinking)"
    return _short(getattr(p, "text", ""), 80)
