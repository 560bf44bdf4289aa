"""What the JSON API returns, built from the projections of the log (plus the UI's live state).

Every shape is a msgspec Struct, encoded by `encode`. Session summaries for the list are folded
incrementally per session (`SessionIndex`), so listing many sessions reads only what is new.
"""

from __future__ import annotations

import functools
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import msgspec

from bubu.engine.childtree import children_json
from bubu.engine.memory import workspace_memory
from bubu.engine.permissions import asked_command, show_command
from bubu.engine.recovery import lease_is_stale
from bubu.events import (
    JSON,
    Compaction,
    PermissionRequest,
    Record,
    SessionStarted,
    SystemNote,
    Text,
    kind_of,
)
from bubu.log.store import SessionInfo, Store
from bubu.projections.context import diagnose
from bubu.projections.longrun import fold_longrun
from bubu.projections.memory import fold_plan
from bubu.projections.status import STATES, Shown, Status, fold_status
from bubu.projections.transcript import Message, ToolCard, transcript
from bubu.providers.base import Message as ModelMessage
from bubu.providers.base import ToolSpec
from bubu.toolfacts import facts_of
from bubu.web.notice import NoticeView, notice_view
from bubu.web.runs import RunManager

State = Shown
"""A session's state as the page shows it (the vocabulary of `bubu status`)."""

HEAD_LINES = 30
HEAD_CHARS = 4000
"""A tool result longer than this is cut in the transcript; the paged viewer shows all of it."""

_encoder = msgspec.json.Encoder(order="sorted")


def encode(obj: object) -> bytes:
    """JSON bytes of a view (Structs, dataclasses and plain values), keys sorted."""
    return _encoder.encode(obj)


class UsageTotalsView(msgspec.Struct, kw_only=True):
    """Token totals."""

    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cost_usd: float | None = None
    """The priced calls' total in USD (None: no call had a known price)."""
    unpriced_calls: int = 0


class SessionRow(msgspec.Struct, kw_only=True):
    """One line of the sessions list."""

    id: str
    title: str
    workspace: str
    model: str | None
    created_ms: int
    last_ms: int | None
    events: int
    status: State
    reason: str | None
    turns: int
    pending_permissions: int
    notice: bool
    usage: UsageTotalsView
    running_here: bool
    snippet: str | None = None
    parent: str | None = None
    """The session that started this one as a sub-agent."""
    """Where a search matched the transcript (a session search only)."""


class MessageItem(msgspec.Struct, kw_only=True, tag="message", tag_field="type"):
    """A message, thinking, error, note, recovery notice or compaction marker."""

    seq: int
    kind: Literal["user", "assistant", "thinking", "error", "note", "notice", "compaction"]
    text: str
    turn: str | None = None
    watermark: int | None = None
    html: str | None = None
    """The model's text rendered from Markdown and sanitized (`bubu.web.markdown`), for the
    page to show as it is; only on the model's own messages."""


class ToolItem(msgspec.Struct, kw_only=True, tag="tool", tag_field="type"):
    """A tool card: the call, its status and (the head of) its result."""

    seq: int
    call_id: str
    name: str
    arguments: dict[str, JSON]
    headline: str
    """The argument that names the call, as the tool declares it (`bubu.toolfacts`)."""
    status: str
    effect: str | None
    recovery: str | None
    is_error: bool
    duration_ms: int | None
    result_head: str | None
    result_lines: int
    result_chars: int
    truncated: bool
    blob: str | None


class UsageRow(msgspec.Struct, kw_only=True):
    """One model call's token usage, at the seq of the response's last event."""

    seq: int
    model: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    estimated_input_tokens: int | None
    stop_reason: str | None
    cost_usd: float | None = None


class PermissionView(msgspec.Struct, kw_only=True):
    """A permission request still waiting for a decision."""

    seq: int
    request_id: str
    call_id: str
    tool: str
    summary: str
    reason: str
    answerable: bool
    command: list[str] | None = None
    """A command's lines exactly as a person must read them (⏎ marks, invisible characters
    shown)."""
    protected: bool = False


class LiveView(msgspec.Struct, kw_only=True):
    """What runs now and the model's streamed, not yet committed, text."""

    running_here: bool
    activity: str | None = None
    draft: str = ""
    thinking: str = ""


class WaitingView(msgspec.Struct, kw_only=True):
    """The running turn waits out a provider failure (folded from the log's attempt events)."""

    attempt: int
    """The attempt being waited for (or in flight)."""
    next_at_ms: int
    since_ms: int
    in_flight: bool
    model: str
    error_class: str
    status: int | None
    error: str


class PlanItemView(msgspec.Struct, kw_only=True):
    """One step of the session's plan (update_plan)."""

    text: str
    status: str


class NoteView(msgspec.Struct, kw_only=True):
    """One note remembered in the session's workspace (by any session of it)."""

    key: str
    text: str
    ts: int
    session: str


class ChildView(msgspec.Struct, kw_only=True):
    """One sub-agent of the session: its session, state, spend and its own sub-agents."""

    session: str
    call_id: str
    agent: str | None
    model: str
    branch: str | None
    state: str
    tokens: int
    cost_usd: float
    children: list[ChildView] = msgspec.field(default_factory=list)


class ProcessView(msgspec.Struct, kw_only=True):
    """A background process the log says is running."""

    handle: str
    command: str
    pid: int | None
    keep: str
    output_bytes: int


class Detail(msgspec.Struct, kw_only=True):
    """Everything the session page shows at once."""

    session: SessionRow
    items: list[MessageItem | ToolItem]
    usage: list[UsageRow]
    notice: NoticeView | None
    permissions: list[PermissionView]
    live: LiveView
    error: str | None
    high_water: int
    waiting: WaitingView | None = None
    cause: str | None = None
    """Why a resumable turn ended: a limit (max_steps, max_tokens, max_time) or
    provider_unavailable."""
    plan: list[PlanItemView] | None = None
    memory: list[NoteView] = msgspec.field(default_factory=list)
    children: list[ChildView] = msgspec.field(default_factory=list)
    """The session's sub-agents, each with its own (a tree)."""
    processes: list[ProcessView] = msgspec.field(default_factory=list)
    first_seq: int = 0
    """The items start after this seq (0: the whole transcript; else older pages remain)."""


class LogRow(msgspec.Struct, kw_only=True):
    """A row of the raw log."""

    seq: int
    hash: str
    kind: str
    role: str
    author: str
    visibility: str
    status: str | None
    turn: str | None
    run: str | None
    ts: int


class LogPage(msgspec.Struct, kw_only=True):
    """A page of raw log rows after `after`."""

    rows: list[LogRow]
    high_water: int


class LinePage(msgspec.Struct, kw_only=True):
    """A page of lines of a (possibly offloaded) tool result."""

    offset: int
    lines: list[str]
    total_lines: int
    size: int
    sha256: str | None


def log_row(r: Record) -> LogRow:
    """The raw-log row of a record."""
    ev = r.event
    return LogRow(
        seq=r.seq,
        hash=r.hash,
        kind=kind_of(ev),
        role=ev.role,
        author=ev.author,
        visibility=ev.visibility,
        status=ev.status,
        turn=ev.turn,
        run=ev.run,
        ts=ev.ts,
    )


def state_of(store: Store, info: SessionInfo, st: Status) -> State:
    """`running` when the open turn's runner holds a live lease, `open turn` when it died."""
    if st.state != "open":
        return st.state
    stale = lease_is_stale(store.current_lease(info.id), store.now_ms())
    return "open turn" if stale else "running"


# -- the sessions list ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Summary:
    high_water: int = 0
    status: Status = field(default_factory=Status)
    usage: UsageTotalsView = field(default_factory=UsageTotalsView)
    parent: str | None = None
    requests: list[str] | None = field(default_factory=list)
    """The user's requests, lowercased (None: not read yet, for a summary seeded from a
    snapshot)."""


def _seeded(store: Store, info: SessionInfo) -> _Summary:
    """A fresh summary: from the session view snapshot and the user's texts when the log is
    long (so that the list does not read a long log whole), else empty (folded from the log)."""
    from bubu.log import readview

    if info.high_water < readview.EVERY:
        return _Summary()
    view = readview.load(store, info.id)
    u, cost = view.usage, view.usage.cost
    usage = UsageTotalsView(
        model_calls=u.model_calls,
        input_tokens=u.input_tokens,
        output_tokens=u.output_tokens,
        cache_read_tokens=u.cache_read_tokens,
        unpriced_calls=cost.unpriced_calls,
        cost_usd=cost.usd if cost.priced_calls else None,
    )
    first = next(iter(store.read(info.id, upto=1)), None)
    parent = (
        c.note.parent
        if first is not None
        and isinstance(c := first.event.content, SystemNote)
        and isinstance(c.note, SessionStarted)
        else None
    )
    return _Summary(
        high_water=view.high_water, status=view.status, usage=usage, requests=None, parent=parent
    )


def _requests(store: Store, info: SessionInfo, upto: int) -> list[str]:
    """The user's requests up to `upto`, lowercased (what the list's text filter looks in)."""
    return [
        c.text[:2000].lower()
        for r in store.read(info.id, upto=upto, kinds=("text",))
        if isinstance(c := r.event.content, Text) and r.event.role == "user"
    ]


def _about_memory(r: Record) -> bool:
    """Whether a record of the memory kinds can change a note: a remember call or its outcome,
    or a note (forgotten, accepted, a session's origin)."""
    c = r.event.content
    return isinstance(c, SystemNote) or getattr(c, "name", None) == "remember"


class SessionIndex:
    """Per-session summaries for the list, folded incrementally from each session's new records."""

    def __init__(self, store: Store, manager: RunManager) -> None:
        self.store = store
        self.manager = manager
        self._lock = threading.Lock()
        self._cache: dict[str, _Summary] = {}
        self._memory: dict[str, tuple[int, list[Record]]] = {}

    def _summary(self, info: SessionInfo) -> _Summary:
        with self._lock:
            s = self._cache.get(info.id)
            if s is None:
                s = self._cache[info.id] = _seeded(self.store, info)
            if info.high_water > s.high_water:
                new = self.store.read(info.id, after=s.high_water)
                s.status = fold_status(new, s.status)
                for r in new:
                    _count(s.usage, r)
                    c = r.event.content
                    if isinstance(c, Text) and r.event.role == "user" and s.requests is not None:
                        s.requests.append(c.text[:2000].lower())
                    elif isinstance(c, SystemNote) and isinstance(c.note, SessionStarted):
                        s.parent = c.note.parent or s.parent
                if new:
                    s.high_water = new[-1].seq
            return s

    def memory(self, workspace: str) -> list[NoteView]:
        """The workspace's live notes, newest first, from each of its sessions' memory records
        read once and then only as they grow (a page refresh costs what is new)."""
        from bubu.engine.memory import workspace_sessions
        from bubu.projections.memory import MEMORY_KINDS, fold_workspace

        streams = []
        for info in workspace_sessions(self.store, workspace):
            with self._lock:
                hw, kept = self._memory.get(info.id, (0, []))
            if info.high_water > hw:
                new = self.store.read(info.id, after=hw, kinds=MEMORY_KINDS)
                kept = [*kept, *(r for r in new if _about_memory(r))]
                with self._lock:
                    self._memory[info.id] = (info.high_water, kept)
            streams.append((info.id, kept))
        notes = fold_workspace(streams).live
        return [
            NoteView(key=n.key, text=n.text, ts=n.ts, session=n.session)
            for n in sorted(notes.values(), key=lambda n: -n.ts)
        ]

    def _requests(self, info: SessionInfo) -> list[str]:
        s = self._summary(info)
        with self._lock:
            if s.requests is None:
                s.requests = _requests(self.store, info, s.high_water)
            return s.requests

    def row(self, info: SessionInfo) -> SessionRow:
        """The list row of a session."""
        s = self._summary(info)
        st = s.status
        return SessionRow(
            id=info.id,
            title=info.title,
            workspace=info.workspace,
            model=info.model,
            created_ms=info.created_ms,
            last_ms=info.last_ms,
            events=info.high_water,
            status=state_of(self.store, info, st),
            reason=st.reason,
            turns=st.turns,
            pending_permissions=len(st.pending_permissions),
            notice=st.notice_seq is not None and not st.notice_dismissed,
            usage=msgspec.structs.replace(s.usage),
            running_here=self.manager.running_here(info.id),
            parent=s.parent,
        )

    def rows(self, *, status: str | None = None, query: str | None = None) -> list[SessionRow]:
        """Sessions, most recently active first, filtered by state and by text."""
        from bubu.log.search import matching

        words = (query or "").lower().split()
        found = matching(self.store, query or "") if words else {}
        out = []
        for info in self.store.sessions():
            row = self.row(info)
            if status and row.status != status:
                continue
            if words:
                hay = " ".join(
                    [
                        info.id,
                        info.title.lower(),
                        info.workspace.lower(),
                        info.model or "",
                        *self._requests(info),
                    ]
                )
                hit = found.get(info.id)
                if hit is None and not all(w in hay for w in words):
                    continue
                if hit is not None and hit["seq"]:
                    row.snippet = str(hit["snippet"])
            out.append(row)
        out.sort(key=lambda r: r.last_ms or r.created_ms, reverse=True)
        return out


def _count(u: UsageTotalsView, r: Record) -> None:
    a = r.event.actions
    if a is not None and a.token_usage is not None:
        t = a.token_usage
        u.model_calls += 1
        u.input_tokens += t.input_tokens
        u.output_tokens += t.output_tokens
        u.cache_read_tokens += t.cache_read_tokens
        if t.cost_usd is None:
            u.unpriced_calls += 1
        else:
            u.cost_usd = (u.cost_usd or 0.0) + t.cost_usd


# -- the session page ----------------------------------------------------------------------------


NOTICE_WINDOW = 2_000
"""Events before a recovery notice a paged session page reads to review the calls it names."""


def detail(index: SessionIndex, info: SessionInfo, *, tail: int | None = None) -> Detail:
    """The session page: transcript items, usage per call, notice, pending permissions, live state.

    With `tail`, only the last `tail` transcript items (and the usage rows among them): the
    session view snapshot gives the rest, so the page costs what it shows, not the log's length
    (`first_seq` says where the items start; `items_page` reads older ones)."""
    if tail is not None:
        return _paged_detail(index, info, tail)
    store, manager = index.store, index.manager
    records = store.read(info.id)
    st = fold_status(records)
    compactions = {
        r.seq: r.event.content.note.watermark
        for r in records
        if isinstance(r.event.content, SystemNote) and isinstance(r.event.content.note, Compaction)
    }
    items: list[MessageItem | ToolItem] = []
    for item in transcript(records).items:
        if isinstance(item, ToolCard):
            items.append(_tool_item(item))
        else:
            items.append(_message_item(item, compactions.get(item.seq)))
    usage = [
        UsageRow(
            seq=r.seq,
            model=t.model,
            input_tokens=t.input_tokens,
            output_tokens=t.output_tokens,
            cache_read_tokens=t.cache_read_tokens,
            cache_write_tokens=t.cache_write_tokens,
            estimated_input_tokens=t.estimated_input_tokens,
            stop_reason=t.stop_reason,
            cost_usd=t.cost_usd,
        )
        for r in records
        if r.event.actions is not None and (t := r.event.actions.token_usage) is not None
    ]
    notice = None
    if st.notice is not None and st.notice_seq is not None:
        notice = notice_view(records, st.notice_seq, st.notice, dismissed=st.notice_dismissed)
    running_here = manager.running_here(info.id)
    state = state_of(store, info, st)
    permissions = _permissions(index, info, st, state, records)
    live = manager.live(info.id)
    return Detail(
        session=index.row(info),
        items=items,
        usage=usage,
        notice=notice,
        permissions=permissions,
        live=LiveView(
            running_here=running_here,
            activity=live.activity,
            draft=live.draft,
            thinking=live.thinking,
        ),
        error=manager.error(info.id),
        high_water=records[-1].seq if records else 0,
        waiting=_waiting(records) if state == "running" else None,
        cause=(st.state in ("failed", "stopped") and fold_longrun(records).end_cause) or None,
        plan=_plan(records),
        children=msgspec.convert(children_json(store, records), list[ChildView]),
        processes=_processes(records),
        memory=[
            NoteView(key=n.key, text=n.text, ts=n.ts, session=n.session)
            for n in sorted(workspace_memory(store, info.workspace).values(), key=lambda n: -n.ts)
        ],
    )


def _processes(records: list[Record]) -> list[ProcessView]:
    from bubu.projections.processes import fold_processes

    return [
        ProcessView(handle=p.handle, command=p.command, pid=p.pid, keep=p.keep, output_bytes=p.size)
        for p in fold_processes(records).running()
    ]


PANEL_KINDS = (
    "child_started",
    "child_finished",
    "process_started",
    "process_output",
    "process_ended",
)
"""The kinds the sub-agents and background processes panels are folded from."""


def _paged_detail(index: SessionIndex, info: SessionInfo, tail: int) -> Detail:
    from bubu.log import readview
    from bubu.projections.views import tail_start

    store, manager = index.store, index.manager
    view = readview.load(store, info.id)
    st, hw = view.status, view.high_water
    start = tail_start(view, tail) if tail > 0 else hw
    records = store.read(info.id, after=start, upto=hw)
    items, usage = page_items(records, tail)
    notice = None
    if st.notice is not None and st.notice_seq is not None:
        near = store.read(info.id, after=max(0, st.notice_seq - NOTICE_WINDOW), upto=hw)
        notice = notice_view(near, st.notice_seq, st.notice, dismissed=st.notice_dismissed)
    state = state_of(store, info, st)
    asked = (
        store.read(info.id, upto=hw, kinds=("permission_request",))
        if st.pending_permissions
        else []
    )
    permissions = _permissions(index, info, st, state, asked)
    noted = store.read(info.id, upto=hw, kinds=PANEL_KINDS)
    live = manager.live(info.id)
    w = view.longrun.waiting() if state == "running" else None
    return Detail(
        session=index.row(info),
        items=items,
        usage=usage,
        notice=notice,
        permissions=permissions,
        live=LiveView(
            running_here=manager.running_here(info.id),
            activity=live.activity,
            draft=live.draft,
            thinking=live.thinking,
        ),
        error=manager.error(info.id),
        high_water=hw,
        first_seq=start,
        waiting=None
        if w is None
        else WaitingView(
            attempt=w.attempt + 1,
            next_at_ms=w.next_at_ms,
            since_ms=w.since_ms,
            in_flight=w.in_flight,
            model=w.model,
            error_class=w.error_class,
            status=w.status,
            error=w.message,
        ),
        cause=(st.state in ("failed", "stopped") and view.longrun.end_cause) or None,
        plan=None
        if view.plan is None
        else [PlanItemView(text=i.text, status=i.status) for i in view.plan],
        children=msgspec.convert(children_json(store, noted), list[ChildView]),
        processes=_processes(noted),
        memory=index.memory(info.workspace),
    )


def _permissions(
    index: SessionIndex, info: SessionInfo, st: Status, state: State, records: list[Record]
) -> list[PermissionView]:
    manager = index.manager
    waiting = {p.request_id for p in manager.waiting(info.id)}
    running_here = manager.running_here(info.id)
    requests: dict[str, tuple[int, PermissionRequest]] = {
        a.permission_request.request_id: (r.seq, a.permission_request)
        for r in records
        if (a := r.event.actions) is not None and a.permission_request is not None
    }
    out = []
    for rid in st.pending_permissions:
        if rid not in requests:
            continue
        seq, req = requests[rid]
        answerable = rid in waiting or (running_here and rid == st.pending_permissions[-1])
        if answerable or state == "running":
            out.append(
                PermissionView(
                    seq=seq,
                    request_id=rid,
                    call_id=req.call_id,
                    tool=req.tool,
                    summary=req.summary,
                    reason=req.reason,
                    answerable=answerable,
                    command=None if (cmd := asked_command(req)) is None else show_command(cmd),
                    protected=req.protected,
                )
            )
    return out


def page_items(
    records: list[Record],
    last: int | None = None,
    *,
    before: int | None = None,
    all_usage: bool = False,
) -> tuple[list[MessageItem | ToolItem], list[UsageRow]]:
    """The transcript items of `records` (the last `last` of them; only those before seq
    `before`), and the usage rows from the first of them on (`all_usage`: every one)."""
    compactions = {
        r.seq: r.event.content.note.watermark
        for r in records
        if isinstance(r.event.content, SystemNote) and isinstance(r.event.content.note, Compaction)
    }
    shown = [i for i in transcript(records).items if before is None or i.seq < before]
    if last is not None:
        shown = shown[-last:] if last > 0 else []
    items: list[MessageItem | ToolItem] = [
        _tool_item(i) if isinstance(i, ToolCard) else _message_item(i, compactions.get(i.seq))
        for i in shown
    ]
    first = 0 if all_usage else items[0].seq if items else None
    usage = [
        UsageRow(
            seq=r.seq,
            model=t.model,
            input_tokens=t.input_tokens,
            output_tokens=t.output_tokens,
            cache_read_tokens=t.cache_read_tokens,
            cache_write_tokens=t.cache_write_tokens,
            estimated_input_tokens=t.estimated_input_tokens,
            stop_reason=t.stop_reason,
            cost_usd=t.cost_usd,
        )
        for r in records
        if first is not None
        and r.seq >= first
        and (before is None or r.seq < before)
        and r.event.actions is not None
        and (t := r.event.actions.token_usage) is not None
    ]
    return items, usage


class ItemsPage(msgspec.Struct, kw_only=True):
    """Older transcript items: those before `before`, starting after seq `first_seq`."""

    items: list[MessageItem | ToolItem]
    usage: list[UsageRow]
    first_seq: int


RESULT_SLACK = 64
"""Events past a page a reader also folds, so that the page's tool cards show their outcomes."""


def items_page(store: Store, info: SessionInfo, *, before: int, limit: int) -> ItemsPage:
    """The `limit` transcript items before seq `before`, from the session view's item index:
    only their records are read."""
    import bisect

    from bubu.log import readview

    view = readview.load(store, info.id)
    i = bisect.bisect_left(view.items, before)
    lo = max(0, i - limit)
    start = 0 if lo == 0 else view.items[lo] - 1
    records = store.read(info.id, after=start, upto=min(before - 1 + RESULT_SLACK, view.high_water))
    items, usage = page_items(records, before=before)
    return ItemsPage(items=items, usage=usage, first_seq=start)


def _plan(records: list[Record]) -> list[PlanItemView] | None:
    plan = fold_plan(records)
    return None if plan is None else [PlanItemView(text=i.text, status=i.status) for i in plan]


def _waiting(records: list[Record]) -> WaitingView | None:
    w = fold_longrun(records).waiting()
    if w is None:
        return None
    return WaitingView(
        attempt=w.attempt + 1,
        next_at_ms=w.next_at_ms,
        since_ms=w.since_ms,
        in_flight=w.in_flight,
        model=w.model,
        error_class=w.error_class,
        status=w.status,
        error=w.message,
    )


def _message_item(m: Message, watermark: int | None) -> MessageItem:
    if watermark is not None:
        return MessageItem(
            seq=m.seq, kind="compaction", text=m.text, turn=m.turn, watermark=watermark
        )
    html = _markdown(m.text) if m.kind == "assistant" else None
    return MessageItem(seq=m.seq, kind=m.kind, text=m.text, turn=m.turn, html=html)


@functools.cache
def _renderer() -> Callable[[str], str] | None:
    """`bubu.web.markdown.to_html`; None (the page shows plain text) in an environment installed
    before the Markdown libraries were required."""
    try:
        from bubu.web.markdown import to_html
    except ImportError:
        return None
    return to_html


def _markdown(text: str) -> str | None:
    render = _renderer()
    return None if render is None else render(text)


def _headline(c: ToolCard) -> str:
    value = facts_of(c.name).headline_of(c.arguments)
    return "" if value is None else str(value)


def card_item(c: ToolCard) -> ToolItem:
    """A tool card as the page shows it."""
    return _tool_item(c)


def _tool_item(c: ToolCard) -> ToolItem:
    result = c.result
    head: str | None = None
    lines = chars = 0
    truncated = False
    if result is not None:
        all_lines = result.splitlines()
        lines, chars = len(all_lines), len(result)
        head = "\n".join(all_lines[:HEAD_LINES])
        if len(head) > HEAD_CHARS:
            head = head[:HEAD_CHARS]
        truncated = head != result.rstrip("\n") or c.blob is not None
    return ToolItem(
        seq=c.seq,
        call_id=c.call_id,
        name=c.name,
        arguments=dict(c.arguments),
        headline=_headline(c),
        status=c.status,
        effect=c.effect,
        recovery=c.recovery,
        is_error=c.is_error,
        duration_ms=c.duration_ms,
        result_head=head,
        result_lines=lines,
        result_chars=chars,
        truncated=truncated,
        blob=c.blob,
    )


class CheckpointView(msgspec.Struct, kw_only=True):
    """The compaction checkpoint the next request starts from."""

    key: str
    watermark: int


class ContextView(msgspec.Struct, kw_only=True):
    """The next model request as the model would see it (what `bubu context` shows)."""

    system: str
    tools: list[ToolSpec]
    messages: list[ModelMessage]
    estimated_tokens: int
    calibrated_tokens: int
    """The estimate corrected by what the provider counted so far: the figure `bubu context`
    shows (`~N of … tokens`)."""
    request_digest: str
    checkpoint: CheckpointView | None
    inclusion: dict[str, int]
    high_water: int


def context_view(store: Store, info: SessionInfo) -> ContextView:
    """The next request exactly as the runner would build it: checkpoint, placeholders and all."""
    from bubu.engine.inspect import inspect_request

    seen = inspect_request(store, info)
    request, cp = seen.next.request, seen.fold.context.checkpoint
    counts = Counter[str](inc for _, _, inc, _ in diagnose(seen.records, seen.fold.context))
    return ContextView(
        system=request.system,
        tools=list(request.tools),
        messages=list(request.messages),
        estimated_tokens=seen.next.estimate,
        calibrated_tokens=int(seen.next.estimate * seen.calibration),
        request_digest=seen.next.digest,
        checkpoint=None if cp is None else CheckpointView(key=cp.key, watermark=cp.watermark),
        inclusion=dict(counts),
        high_water=seen.high_water,
    )


def line_page(data: str, *, offset: int, limit: int, sha256: str | None) -> LinePage:
    """Lines `offset..offset+limit-1` (1-based) of a text."""
    lines = data.splitlines()
    start = max(1, offset)
    return LinePage(
        offset=start,
        lines=lines[start - 1 : start - 1 + max(1, min(limit, 2000))],
        total_lines=len(lines),
        size=len(data.encode("utf-8", "replace")),
        sha256=sha256,
    )


def result_text(store: Store, info: SessionInfo, call_id: str) -> tuple[str, str | None] | None:
    """The whole result of a call (the offloaded bytes when there are any) and its blob hash."""
    from bubu.events import FunctionResponse

    for r in store.read(info.id, kinds=("function_response",)):
        c = r.event.content
        if isinstance(c, FunctionResponse) and c.call_id == call_id:
            if c.blob is not None:
                data = store.blob(c.blob.sha256)
                if data is not None:
                    return data.decode("utf-8", "replace"), c.blob.sha256
            return c.result, None
    return None


__all__ = [
    "STATES",
    "CheckpointView",
    "ContextView",
    "Detail",
    "LinePage",
    "LogPage",
    "LogRow",
    "SessionIndex",
    "SessionRow",
    "context_view",
    "detail",
    "encode",
    "line_page",
    "log_row",
    "result_text",
    "state_of",
]
