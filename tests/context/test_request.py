"""Request assembly (DESIGN §6): a stable prefix, determinism (same prefix → same bytes and digest),
the recorded digest naming exactly what was sent, incremental folding, and calibration."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from bubu.engine.prompt import system_prompt
from bubu.engine.session import new_session, start_turn
from bubu.events import FunctionResponse, TokenUsage
from bubu.log.sqlite import SQLiteStore
from bubu.log.store import SessionInfo
from bubu.messages import canonical
from bubu.projections.context import ContextFold
from bubu.projections.request import (
    Calibration,
    NextRequest,
    Prefix,
    RequestFold,
    build,
    fold_request,
    tool_specs,
)
from bubu.projections.turn import fold as fold_turn

from .helpers import (
    WINDOW,
    Emit,
    Model,
    compactions,
    config,
    context_tools,
    encode,
    host,
    model,
    model_requests,
    noisy_lines,
    noisy_payloads,
    noisy_turn,
    write_script,
)


def _project(store: SQLiteStore, info: SessionInfo, provider: Model) -> NextRequest:
    """The next request, projected from the log alone: records, blobs, prefix in; no runner."""
    records = store.read(info.id)
    turn = fold_turn(records)
    fold = fold_request(records)
    blobs = {sha: data for sha in fold.blobs_needed() if (data := store.blob(sha)) is not None}
    tools = tool_specs({**context_tools(), "emit": Emit({})}.values())
    prefix = Prefix(
        model=provider.spec,
        system=turn.system_prompt or system_prompt(info.workspace),
        tools=tools,
        session_id=info.id,
    )
    return build(fold, prefix, ordinal=turn.model_responses, blobs=blobs)


def test_every_request_starts_with_the_same_system_prompt_and_tools(
    tmp_path: Path, sqlite_store: SQLiteStore
) -> None:
    _, provider = noisy_turn(tmp_path, sqlite_store, steps=24)
    turns = provider.turns()
    prefixes = {encode([r.system, r.tools]) for r in turns}
    assert len(prefixes) == 1
    assert len(turns) == 25


def test_between_compactions_a_request_extends_the_previous_one(
    tmp_path: Path, sqlite_store: SQLiteStore
) -> None:
    _, provider = noisy_turn(tmp_path, sqlite_store, steps=16)
    pairs = 0
    for before, after in zip(provider.requests, provider.requests[1:], strict=False):
        if "summary" in (before.purpose, after.purpose):
            continue
        # All but the newest step's results are byte-identical; those turned into a placeholder.
        kept = len(before.messages) - 1
        assert encode(after.messages[:kept]) == encode(before.messages[:kept])
        assert len(after.messages) == len(before.messages) + 2
        pairs += 1
    assert pairs >= 12


def test_two_projections_of_the_log_build_the_same_request_bytes_and_digest(
    tmp_path: Path, sqlite_store: SQLiteStore
) -> None:
    info, provider = noisy_turn(tmp_path, sqlite_store, steps=16)
    assert compactions(sqlite_store.read(info.id))
    a, b = _project(sqlite_store, info, provider), _project(sqlite_store, info, provider)
    assert encode(a.request) == encode(b.request)
    assert (a.digest, a.estimate) == (b.digest, b.estimate)


def test_the_projection_is_pure_and_its_memo_only_a_cache(
    tmp_path: Path, sqlite_store: SQLiteStore
) -> None:
    """The same records and inputs give the same request whether folded in one go or step by
    step with a request built after every record (the memo filled as the runner fills it), and
    building twice changes nothing; without the hot blobs' bytes a result shows its placeholder."""
    info, provider = noisy_turn(tmp_path, sqlite_store, steps=16)
    records = sqlite_store.read(info.id)
    # Up to the last offloaded result: the newest step then shows it whole.
    last = max(
        i
        for i, r in enumerate(records)
        if isinstance(c := r.event.content, FunctionResponse) and c.blob is not None
    )
    records = records[: last + 1]
    prefix = Prefix(model=provider.spec, system=system_prompt(info.workspace), tools=())
    step = RequestFold()
    for r in records:
        step.apply(r)
        build(step, prefix, ordinal=1, blobs=_blobs(sqlite_store, step))
    whole = fold_request(records)
    hot = _blobs(sqlite_store, whole)
    assert hot, "the noisy turn's last step has an offloaded result shown whole"
    a = build(step, prefix, ordinal=1, blobs=_blobs(sqlite_store, step))
    b = build(whole, prefix, ordinal=1, blobs=hot)
    assert (encode(a.request), a.digest) == (encode(b.request), b.digest)
    assert build(whole, prefix, ordinal=1, blobs=hot).digest == b.digest
    bare = build(fold_request(records), prefix, ordinal=1, blobs={})
    assert bare.digest != b.digest
    assert bare.estimate < b.estimate
    # A fold that was once built without them still builds the whole request when given them.
    assert build(fold_request(records), prefix, ordinal=1, blobs={}).digest == bare.digest
    late = fold_request(records)
    build(late, prefix, ordinal=1, blobs={})
    assert build(late, prefix, ordinal=1, blobs=hot).digest == b.digest


def _blobs(store: SQLiteStore, fold: RequestFold) -> dict[str, bytes]:
    return {sha: data for sha in fold.blobs_needed() if (data := store.blob(sha)) is not None}


def test_the_recorded_digest_is_what_a_fresh_runner_builds_from_the_same_prefix(
    tmp_path: Path, sqlite_store: SQLiteStore
) -> None:
    # The turn fails at its 17th model call, right after committing that call's request digest.
    lines: list[dict[str, object]] = [
        *noisy_lines(16)[:-1],
        {"error": {"status": 400, "message": "refused"}},
    ]
    script = write_script(tmp_path / "s.jsonl", lines)
    provider = model(script)
    info = new_session(sqlite_store, task="make noise", workspace=tmp_path, model=provider.spec)
    assert (
        start_turn(host(sqlite_store, provider, noisy_payloads(16)), info, "make noise") == "failed"
    )
    records = sqlite_store.read(info.id)
    assert compactions(records)
    *_, (_, last) = model_requests(records)

    projected = _project(sqlite_store, info, provider)
    assert (projected.digest, projected.estimate) == (last.request_digest, last.estimated_tokens)
    assert encode(projected.request) == encode(provider.turns()[-1])
    assert last.checkpoint == projected.checkpoint


def test_two_sessions_with_the_same_history_send_the_same_requests(tmp_path: Path) -> None:
    digests = []
    sent = []
    for name in ("a", "b"):
        with SQLiteStore(tmp_path / f"{name}.db") as store:
            info, provider = noisy_turn(tmp_path, store, steps=16)
            digests.append([n.request_digest for _, n in model_requests(store.read(info.id))])
            # Each session is its own prompt-cache key; the rest of the request is the same.
            assert {r.session_id for r in provider.requests if r.purpose == "turn"} == {info.id}
            sent.append(
                [encode(msgspec.structs.replace(r, session_id="")) for r in provider.requests]
            )
    assert digests[0] == digests[1]
    assert sent[0] == sent[1]
    assert len(set(digests[0])) == len(digests[0])


def test_folding_in_one_go_or_step_by_step_gives_the_same_messages(
    tmp_path: Path, sqlite_store: SQLiteStore
) -> None:
    info, _ = noisy_turn(tmp_path, sqlite_store, steps=16)
    records = sqlite_store.read(info.id)
    step = ContextFold()
    for r in records:
        step.apply(r)
        step.fingerprint(_hot(sqlite_store, step))  # fills the memo as the driver does
    whole = ContextFold()
    for r in records:
        whole.apply(r)
    blobs = _hot(sqlite_store, whole)
    assert encode(step.messages(blobs)) == encode(whole.messages(blobs))
    assert step.fingerprint(blobs) == whole.fingerprint(blobs)
    _, size = whole.fingerprint(blobs)
    assert size == sum(len(canonical(m)) for m in whole.messages(blobs))


def _hot(store: SQLiteStore, fold: ContextFold) -> dict[str, bytes]:
    return {sha: data for sha in fold.hot_blobs() if (data := store.blob(sha)) is not None}


def test_calibration_follows_the_reported_usage_and_is_bounded() -> None:
    cal = Calibration()
    assert cal.factor == 1.0
    cal.apply(TokenUsage(model="m", output_tokens=1, input_tokens=300, estimated_input_tokens=None))
    assert cal.factor == 1.0
    cal.apply(TokenUsage(model="m", output_tokens=1, input_tokens=200, estimated_input_tokens=100))
    assert cal.factor == pytest.approx(2.0)
    cal.apply(
        TokenUsage(model="m", output_tokens=1, input_tokens=100_000, estimated_input_tokens=100)
    )
    assert cal.factor == 4.0
    for _ in range(20):
        cal.apply(
            TokenUsage(model="m", output_tokens=1, input_tokens=10, estimated_input_tokens=100)
        )
    assert cal.factor == 0.25
    for _ in range(20):
        cal.apply(
            TokenUsage(model="m", output_tokens=1, input_tokens=150, estimated_input_tokens=100)
        )
    assert cal.factor == pytest.approx(1.5)


def test_a_provider_counting_twice_the_estimate_makes_compaction_come_earlier(
    tmp_path: Path,
) -> None:
    window = 2 * WINDOW
    runs = {}
    for factor in (0.0, 1.0, 2.0):
        d = tmp_path / str(factor)
        d.mkdir()
        with SQLiteStore(d / "bubu.db") as store:
            info, provider = noisy_turn(
                d,
                store,
                steps=16,
                model_kw={"usage_factor": factor},
                host_kw={"config": config(window)},
            )
            records = store.read(info.id)
            firsts = [i for i, r in enumerate(provider.requests) if r.purpose == "summary"]
            runs[factor] = (firsts[0] if firsts else None, model_requests(records))
    # Reported = estimate: no change. Twice the estimate: the threshold is reached at half the size.
    assert runs[0.0][0] is None
    assert runs[1.0][0] is None
    first, calls = runs[2.0]
    assert first is not None
    # The last call before the summary was just under half the threshold; the next would pass it.
    last = calls[first - 1][1].estimated_tokens
    half = min(0.8 * window, window - window // 4) / 2
    # The calibrated factor is a hair under 2 (the estimate also counts the request's header),
    # so the last call may pass exactly half by that hair.
    assert 0.9 * half < last <= 1.005 * half
    # Without the factor the same history grew past that size and never needed a summary.
    assert max(n.estimated_tokens for _, n in runs[0.0][1]) > 1.2 * half
