"""The runner's folds as a materialized view of the log: what a runner reloads a session from.

    state(n) = apply(snapshot(k), log[k+1…n])

`RunnerFolds` is every fold a runner keeps of its session (turn, long-run budget, project
instructions, the next request, the quota of stored results, offloaded blobs, call ids). A
snapshot of it is a derived record in the store's views table, named by the seq it covers and
the chain digest of that prefix, and built only from committed records (a fold of the log, never
the live state of a run, whose render caches and staged events are not the log's). A runner
takes the stored snapshot when the log still holds that digest at that seq and the snapshot was
folded under the same context policy, and folds only the records after it; the writer stores a
new one every `EVERY` events. A snapshot that disagrees with the log, with its own checksum or
with the policy is ignored and rebuilt from the log, and `bubu verify` reports it. Deleting every
snapshot changes nothing but speed.

The folds are plain Structs with private parts, tuple-keyed maps and shared references (a call
is both in the turn's calls and its last outcome), so the bytes are a pickle read back by an
unpickler that builds only the fold and event classes of Bubu (`_Loader`): a forged row can make
nothing else, and a row that fails any check is a cache miss.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import io
import pickle
import zlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from bubu import toolfacts
from bubu.context.policy import ContextPolicy
from bubu.context.quota import StoredWhole
from bubu.engine.callids import CallIds
from bubu.errors import BubuError, CorruptLog
from bubu.events import FunctionCall, Record
from bubu.log import codec, readview
from bubu.log.store import Store, VerifyReport, View
from bubu.log.verify import (
    RUNNER_VIEW,
    RUNNER_VIEW_KEY,
    RUNNER_VIEW_VERSION,
    verify_linked,
    verify_records,
)
from bubu.projections.context import ContextFold
from bubu.projections.instructions import InstructionsFold
from bubu.projections.longrun import LongRunFold
from bubu.projections.request import RequestFold
from bubu.projections.turn import TurnFold

if TYPE_CHECKING:
    from bubu.projections.recovery import Integrity, Rewinding
    from bubu.snapshot.refs import OpenSnapshots

KIND, VERSION, KEY = RUNNER_VIEW, RUNNER_VIEW_VERSION, RUNNER_VIEW_KEY
"""The views table's kind for runner state snapshots, and the key of this version's."""
EVERY = 1_000
"""Events folded past the last snapshot at which the writer (or a reader) stores a new one."""


Commands = tuple[tuple[str, str], ...]
"""The command tools whose calls the fact sheet counts, with the argument that holds the command
line (declared by the tools a process loaded: the fold depends on them)."""


def command_tools() -> Commands:
    """The command tools this process declared."""
    return tuple(sorted((n, f.command) for n, f in toolfacts.declared().items() if f.command))


def fingerprint(policy: ContextPolicy, commands: Commands) -> str:
    """What the folds were built under: a snapshot of another policy or another set of command
    tools is rebuilt, not used."""
    return hashlib.sha256(repr((policy, commands)).encode()).hexdigest()[:16]


@contextlib.contextmanager
def _declared(commands: Commands) -> Iterator[None]:
    """The command tools `commands` declared for the time of a fold (for `bubu verify`, which
    loads no tools), each as it was again afterwards."""
    before = toolfacts.declared()
    for name, arg in commands:
        if before.get(name, toolfacts.NO_FACTS).command != arg:
            toolfacts.declare(name, toolfacts.ToolFacts(command=arg))
    try:
        yield
    finally:
        for name, _ in commands:
            if name in before:
                toolfacts.declare(name, before[name])
            else:
                toolfacts._DECLARED.pop(name, None)


def _recovery() -> Any:
    """The recovery folds' module, loaded when a fold of them is made (a reader that checks no
    runner state, e.g. `bubu verify` of a short session, does without it)."""
    from bubu.projections import recovery

    return recovery


def _refs() -> Any:
    from bubu.snapshot import refs

    return refs


class RunnerFolds(msgspec.Struct, kw_only=True, eq=False):
    """Every fold of a runner, of the records folded so far.

    Built with a policy (`RunnerFolds(policy=p)`), it makes its folds for that policy and the
    command tools this process declared; read back from a snapshot (every field given), it keeps
    what it was given, its fingerprint included, which `stored` then checks."""

    policy: ContextPolicy
    commands: Commands | None = None
    """The command tools it is folded under (None: this process's)."""
    fingerprint: str = ""
    turn: TurnFold = msgspec.field(default_factory=TurnFold)
    longrun: LongRunFold = msgspec.field(default_factory=LongRunFold)
    instructions: InstructionsFold = msgspec.field(default_factory=InstructionsFold)
    requests: RequestFold = msgspec.field(default_factory=RequestFold)
    stored: StoredWhole = msgspec.field(default_factory=lambda: StoredWhole(inline_over=-1))
    known_blobs: set[str] = msgspec.field(default_factory=set)
    """The sha-256 of every result this session offloaded."""
    call_ids: CallIds = msgspec.field(default_factory=CallIds)
    integrity: Integrity = msgspec.field(default_factory=lambda: _recovery().Integrity())
    """Recovery's checks of every outcome and recovery fact against the calls before it."""
    rewinding: Rewinding = msgspec.field(default_factory=lambda: _recovery().Rewinding())
    """The open turn's rewind plan, if it is a rewind's."""
    snapshots: OpenSnapshots = msgspec.field(default_factory=lambda: _refs().OpenSnapshots())
    """The workspace snapshot before each dispatch of a call waiting for its outcome."""
    high_water: int = 0
    digest: str = ""
    """The chain digest at `high_water` (of committed records)."""

    def __post_init__(self) -> None:
        if self.commands is None:
            self.commands = command_tools()
        if not self.fingerprint:
            self.fingerprint = fingerprint(self.policy, self.commands)
        if self.requests.policy is not self.policy:  # new: the folds of its policy
            self.requests = RequestFold(policy=self.policy)
        if self.stored.inline_over < 0:
            self.stored = StoredWhole(inline_over=self.policy.offload_bytes)

    def fold(self, records: Sequence[Record]) -> None:
        """Fold committed (or staged) records in, in seq order right after the high water."""
        for r in records:
            self.turn.apply(r)
            self.longrun.apply(r)
            self.instructions.apply(r)
            self.requests.apply(r)
            self.stored.apply(r)
            blob = getattr(r.event.content, "blob", None)
            if blob is not None:
                self.known_blobs.add(blob.sha256)
            if isinstance(r.event.content, FunctionCall):
                self.call_ids.add(r.event.content.call_id)
            self.integrity.apply(r)
            self.rewinding.apply(r)
            self.snapshots.apply(r)
        if records:
            self.high_water, self.digest = records[-1].seq, records[-1].hash


# -- the bytes ------------------------------------------------------------------------------------

_MODULES = (
    "bubu.projections.",
    "bubu.events",
    "bubu.context.",
    "bubu.providers.base",
    "bubu.pricing",
    "bubu.messages",
    "bubu.engine.callids",
    "bubu.engine.reload",
    "bubu.snapshot.refs",
)


def _plain() -> tuple[type, ...]:
    """Classes that are not structs but are plain data."""
    from bubu.projections.idset import IdSet

    r = _recovery()
    return (CallIds, IdSet, r.Integrity, r.Dispatched, r.Rewinding, _refs().OpenSnapshots)


class _Loader(pickle.Unpickler):
    """Builds only Bubu's fold and event classes (data: structs, enums, `_plain`)."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins" and name in ("set", "frozenset", "bytearray"):
            return {"set": set, "frozenset": frozenset, "bytearray": bytearray}[name]
        if (module, name) == ("msgspec._utils", "rebuild"):  # cls(**kwargs), cls found here too
            return super().find_class(module, name)
        if module.startswith(_MODULES) or module in ("bubu.events",):
            obj = super().find_class(module, name)
            if isinstance(obj, type) and (
                issubclass(obj, msgspec.Struct | enum.Enum) or obj in _plain()
            ):
                return obj
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a runner's state")


def encode(state: RunnerFolds) -> bytes:
    """The state's bytes as a store keeps them: a sha-256 line, then the compressed pickle."""
    return readview.framed(zlib.compress(pickle.dumps(state, protocol=5), 1))


def decode(data: object) -> RunnerFolds | None:
    """A stored state, or None when it cannot be read, fails its checksum or is not a state."""
    body = readview.unframed(data)
    if body is None:
        return None
    try:
        state = _Loader(io.BytesIO(zlib.decompress(body))).load()
    except Exception:  # any undecodable snapshot is ignored: the log wins
        return None
    if not isinstance(state, RunnerFolds) or not all(
        hasattr(state, f) for f in RunnerFolds.__struct_fields__
    ):  # not a state, or one of another shape
        return None
    _reindex(state.requests.context)
    return state


def _reindex(c: ContextFold) -> None:
    """The context fold's position of each entry, by identity: new objects after a load."""
    c._index = {id(e): i for i, e in enumerate(c.entries)}


# -- the store ------------------------------------------------------------------------------------


def digest_at(store: Store, session: str, seq: int) -> str | None:
    """The chain digest of the prefix 1..seq (None when the log does not reach it)."""
    rows = store.raw(session, after=seq - 1, upto=seq)
    return bytes(rows[0][1]).hex() if rows else None


def stored(
    store: Store, session: str, policy: ContextPolicy, commands: Commands | None = None
) -> tuple[RunnerFolds | None, str | None]:
    """The stored snapshot if it is valid for `policy` and `commands` (None: this process's), and
    why it is not when there is one that is not (None when there is none, or one of another
    policy: not a fault, only a miss)."""
    try:
        row = store.get_view(KIND, session, KEY)
    except BubuError:
        return None, None
    except (TypeError, ValueError):  # a row rewritten behind Bubu's back, e.g. as text
        return None, "its record cannot be read"
    if row is None:
        return None, None
    return _valid(store, session, row, decode(row.data), policy=policy, commands=commands)


def _valid(
    store: Store,
    session: str,
    row: View,
    state: RunnerFolds | None,
    *,
    policy: ContextPolicy,
    commands: Commands | None,
) -> tuple[RunnerFolds | None, str | None]:
    """`stored`'s answer for the snapshot `row` holds, `state` being its bytes decoded."""
    if digest_at(store, session, row.source_high_water) != row.source_digest:
        return (
            None,
            f"the log's digest at seq {row.source_high_water} is not the one it was built from",
        )
    if state is None:
        return None, "its bytes do not match their checksum or cannot be read"
    if state.digest != row.source_digest:
        return None, "the digest it says it was built at is not its record's"
    if state.high_water != row.source_high_water:
        return (
            None,
            f"it says it covers seq {state.high_water}, its record seq {row.source_high_water}",
        )
    if state.commands is None or state.fingerprint != fingerprint(state.policy, state.commands):
        return None, "its policy is not the one it says it was folded under"
    if state.fingerprint != fingerprint(
        policy, commands if commands is not None else command_tools()
    ):
        return None, None
    return state, None


def save(store: Store, session: str, state: RunnerFolds, digest: str | None = None) -> None:
    """Store `state` (a fold of committed records only) as the session's snapshot; a cache that
    cannot be written is only a cache."""
    if state.high_water == 0 or getattr(store, "readonly", False):
        return
    digest = digest or digest_at(store, session, state.high_water)
    if digest is None:
        return
    state.digest = digest
    adopted, state.requests.adopted = state.requests.adopted, []  # the writer's to cache, not ours
    try:
        data = encode(state)
    finally:
        state.requests.adopted = adopted
    try:
        store.put_view(
            View(
                kind=KIND,
                session=session,
                key=KEY,
                source_high_water=state.high_water,
                source_digest=digest,
                data=data,
            )
        )
    except BubuError:
        return


def load(
    store: Store, session: str, policy: ContextPolicy, *, save_every: int | None = None
) -> tuple[RunnerFolds, list[Record]]:
    """The runner state of the whole log: the last valid snapshot plus the records after it
    (returned too), which must verify from the snapshot's digest (`CorruptLog` otherwise);
    stores a fresh snapshot when the suffix was `save_every` (default `EVERY`) events or more,
    or the stored one was bad."""
    state, records, report = load_verified(store, session, policy, save_every=save_every)
    if not report.ok:
        raise CorruptLog(
            f"session {session}'s log does not verify at seq {report.first_bad_seq} "
            f"({report.problem}); `bubu verify {session}` shows it",
            session=session,
            seq=report.first_bad_seq,
        )
    return state, records


def load_verified(
    store: Store, session: str, policy: ContextPolicy, *, save_every: int | None = None
) -> tuple[RunnerFolds, list[Record], VerifyReport]:
    """`load`, with the check of the records it folds: from the last valid snapshot (a fold of
    records that verified when it was made), the records after it verify from its digest, and
    are folded only if they do; with no snapshot, the whole log. The report says whether they
    did (and where not); when not, the state is the snapshot's, with nothing after it folded.

    Every snapshot is made by this function from one verified before it and records it verified
    in turn, so a snapshot vouches for its whole prefix: rows below it are not re-hashed on
    every continuation (`bubu verify` and `bubu sessions` re-hash the whole chain)."""
    state, bad = stored(store, session, policy)
    if state is None:
        state = RunnerFolds(policy=policy)
    else:
        state.policy = state.requests.policy = state.requests.context.policy = policy
    turn = state.turn
    ended: dict[str | None, int] = {}
    if turn.turn is not None and not turn.open and turn.end_reason is not None:
        ended[turn.turn] = state.high_water  # the turn the prefix ended (at or before it)
    records: list[Record] = []
    report = verify_records(
        session,
        store.raw(session, after=state.high_water),
        after=state.high_water,
        digest=bytes.fromhex(state.digest) if state.high_water else codec.GENESIS,
        ended=ended,
        into=records,
    )
    if not report.ok:
        return state, [], report
    state.fold(records)
    every = EVERY if save_every is None else save_every
    if records and (bad is not None or len(records) >= every):
        save(store, session, state, records[-1].hash)
    return state, records, report


def facts_linked(store: Store, session: str, since: int) -> VerifyReport | None:
    """The rows at or below `since` (a snapshot's prefix, not re-hashed by `load_verified`) that
    a run acts on — the session's first event and each turn's start, which name its workspace,
    title, model and origin — each checked for its links into the chain (`verify_linked`):
    None when they hold, else the first bad one."""
    from bubu.projections.origin import FACT_KINDS

    if since <= 0:
        return None
    seqs = [1, *(r.seq for r in store.read(session, kinds=FACT_KINDS, upto=since))]
    rows: dict[int, tuple[int, bytes, bytes]] = {}
    for seq in sorted(set(seqs)):
        for row in store.raw(session, after=max(seq - 2, 0), upto=seq + 1):
            rows[row[0]] = row
    return verify_linked(session, list(rows.values()), seqs)


def continuable(
    store: Store, session: str, policy: ContextPolicy
) -> tuple[RunnerFolds, list[Record], VerifyReport]:
    """`load_verified`, and the rows of the snapshot's prefix a run acts on linked into the
    chain (`facts_linked`): what every path that continues a session checks before it does."""
    state, records, report = load_verified(store, session, policy)
    if report.ok:
        linked = facts_linked(store, session, state.high_water - len(records))
        report = linked if linked is not None else report
    return state, records, report


def keep_up(
    store: Store, session: str, policy: ContextPolicy, high_water: int, due: int | None
) -> int:
    """For a writer at `high_water`: bring the snapshot up to date when it is `due` (None: not
    known yet), so that it never lags the log by much more than `EVERY` events. Returns the seq
    at which it is due next; costs one fold of the events since the last snapshot per `EVERY`."""
    if due is not None and high_water < due:
        return due
    if due is None:
        state, _ = stored(store, session, policy)
        if state is not None and high_water - state.high_water < EVERY:
            return state.high_water + EVERY
    state, _ = load(store, session, policy, save_every=1)
    return state.high_water + EVERY


def check(store: Store, report: VerifyReport) -> VerifyReport:
    """`report` (of a log that verifies), made bad when the session's runner snapshot disagrees
    with the log: its digest, its checksum, or its content against a fold of the log itself."""
    if not report.ok:
        return report
    bad: str | None
    try:
        row = store.get_view(KIND, report.session, KEY)
    except BubuError:
        return report
    except (TypeError, ValueError):
        row, bad = None, "its record cannot be read"
    else:
        if row is None:
            return report
        decoded = decode(row.data)
        policy = decoded.policy if decoded is not None else ContextPolicy()
        commands = decoded.commands if decoded is not None else None
        state, bad = _valid(store, report.session, row, decoded, policy=policy, commands=commands)
        if bad is None and state is not None:
            fresh = RunnerFolds(policy=policy, commands=state.commands)
            with _declared(state.commands or ()):
                fresh.fold(store.read(report.session, upto=state.high_water))
            if not same(fresh, state):
                bad = "its content is not the fold of the log it names"
    if bad is None:
        return report
    return VerifyReport(
        session=report.session,
        ok=False,
        high_water=report.high_water,
        digest=report.digest,
        first_bad_seq=row.source_high_water if row is not None else None,
        problem=f"the runner state snapshot is ignored ({bad}): runners fold the log instead, "
        "and the session's next run rebuilds it",
    )


def same(a: RunnerFolds, b: RunnerFolds) -> bool:
    """Whether two states hold the same folds (what reloading from a snapshot must give)."""
    return canonical(a) == canonical(b)


def canonical(obj: object) -> object:
    """`obj` as plain comparable values: structs by their fields (private ones too), sets
    sorted, so that two folds compare by what they hold, not by identity or order."""
    if isinstance(obj, list | tuple):
        return [canonical(x) for x in obj]
    if isinstance(obj, set | frozenset):
        return sorted((canonical(x) for x in obj), key=repr)
    if isinstance(obj, dict):
        return [(canonical(k), canonical(v)) for k, v in obj.items()]
    if isinstance(obj, bytearray | bytes | str | int | float | bool) or obj is None:
        return obj
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, CallIds):
        return (canonical(obj._recent), bytes(obj._bits))
    from bubu.projections.idset import IdSet

    if isinstance(obj, IdSet):
        return ("IdSet", obj.keys())
    r = _recovery()
    if isinstance(obj, r.Integrity | r.Rewinding | _refs().OpenSnapshots):  # plain, with slots
        return (type(obj).__name__, [canonical(getattr(obj, n)) for n in type(obj).__slots__])
    if isinstance(obj, ContextFold):  # its index is by identity: compare that it is whole
        index = obj._index
        whole = len(index) == len(obj.entries) and all(
            index.get(id(e)) == i for i, e in enumerate(obj.entries)
        )
        names = [n for n in obj.__struct_fields__ if n != "_index"]
        return ("ContextFold", whole, [(n, canonical(getattr(obj, n))) for n in names])
    if isinstance(obj, RequestFold):  # its adopted checkpoints are the writer's outbox
        names = [n for n in obj.__struct_fields__ if n != "adopted"]
        return ("RequestFold", [(n, canonical(getattr(obj, n))) for n in names])
    if isinstance(obj, msgspec.Struct):
        return (type(obj).__name__, [canonical(getattr(obj, f)) for f in obj.__struct_fields__])
    return repr(obj)


__all__ = [
    "EVERY",
    "KIND",
    "RunnerFolds",
    "canonical",
    "check",
    "continuable",
    "decode",
    "encode",
    "facts_linked",
    "keep_up",
    "load",
    "load_verified",
    "same",
    "save",
    "stored",
]
