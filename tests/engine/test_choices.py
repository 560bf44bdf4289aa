"""The driver's pure decisions: outcome forms under a full disk, permission outcomes, the
compaction trigger, the offload exception for paging tools, what a stop does to the turn and
which foreign records a running session tolerates."""

from __future__ import annotations

import pytest

from bubu.engine.choices import (
    Ask,
    Ended,
    EndStopped,
    Leave,
    Settled,
    after_stop,
    answered,
    benign,
    compact_again,
    cut_note,
    may_offload,
    next_form,
    permission,
)
from bubu.events import (
    Content,
    Info,
    MemoryForgotten,
    NoticeDismissed,
    PermissionDecision,
    Record,
    SystemNote,
    Text,
    make,
)


def test_a_full_disk_degrades_offloaded_to_inline_to_cut_then_gives_up() -> None:
    assert next_form("offloaded") == "inline"
    assert next_form("inline") == "cut"
    assert next_form("cut") is None
    assert "1,234 bytes" in cut_note(1234)
    assert "disk is full" in cut_note(1234)


def test_pages_of_an_offloaded_result_are_never_offloaded_again() -> None:
    assert not may_offload("read_result")
    assert not may_offload("search_result")
    assert may_offload("run_command")


def _decision(decision: str, by: str) -> PermissionDecision:
    return PermissionDecision(request_id="p", call_id="c", decision=decision, by=by)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("recorded", "protected", "policy", "yes", "expected"),
    [
        # Recorded before a crash: kept, never asked again...
        (_decision("allow", "user"), False, False, False, Settled("allow")),
        (_decision("deny", "nobody"), False, True, True, Settled("deny")),
        (_decision("allow", "user"), True, False, False, Settled("allow")),
        # ...except a flag's approval of what is now a protected target.
        (_decision("allow", "flag"), True, False, True, Settled("deny")),
        # Not recorded: the policy allows, --yes approves (and is recorded), or a person is asked.
        (None, False, True, False, Settled("allow")),
        (None, False, False, True, Settled("allow", record=True, by="flag")),
        (None, True, False, True, Ask()),
        (None, False, False, False, Ask()),
    ],
)
def test_permission_outcomes(
    recorded: PermissionDecision | None, protected: bool, policy: bool, yes: bool, expected: object
) -> None:
    got = permission(recorded, protected=protected, allowed_by_policy=policy, yes=yes)
    assert got == expected


def test_nobody_answering_is_a_denial_by_nobody() -> None:
    assert answered(None) == ("deny", "nobody")
    assert answered("allow") == ("allow", "user")
    assert answered("deny") == ("deny", "user")


def test_compaction_runs_while_over_budget_and_moving_at_most_three_times() -> None:
    assert compact_again(over_budget=True, passes=0, before=None, after=0)
    assert not compact_again(over_budget=False, passes=0, before=None, after=0)
    assert compact_again(over_budget=True, passes=1, before=10, after=20)
    assert not compact_again(over_budget=True, passes=1, before=20, after=20)
    assert not compact_again(over_budget=True, passes=3, before=10, after=20)


def test_a_stop_ends_an_open_turn_unless_the_lease_was_lost() -> None:
    assert after_stop("stopped", turn_open=True) == EndStopped("stopped")
    assert after_stop("suspended", turn_open=True) == EndStopped("suspended")
    assert after_stop("stopped", turn_open=False) == Ended()
    assert after_stop("suspended", turn_open=False) == Ended()
    assert after_stop("lease_lost", turn_open=True) == Leave()
    assert after_stop("lease_lost", turn_open=False) == Leave()
    assert after_stop(None, turn_open=True) == Leave()


def _record(seq: int, content: Content) -> Record:
    event = make(session="s", role="system", author="host", ts=0, content=content)
    return Record(seq=seq, hash="", event=event)


def test_only_dismissals_and_forgotten_notes_from_another_process_are_tolerated() -> None:
    dismissed = _record(1, SystemNote(note=NoticeDismissed(notice_seq=1)))
    forgot = _record(2, SystemNote(note=MemoryForgotten(key="k")))
    info = _record(3, SystemNote(note=Info(text="x")))
    text = _record(4, Text(text="hi"))
    assert benign([dismissed, forgot])
    assert not benign([dismissed, info])
    assert not benign([text])
    assert not benign([])  # a conflict with nothing new to fold in is a real one
