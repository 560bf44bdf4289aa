"""The pure rules of a summary: chunks never drop content, and validation refuses a summary that
says nothing of its own or loses the user's request."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from bubu.context.compaction import SECTIONS, SUMMARY_SYSTEM, carries, chunk_items, validate

GOOD = (
    "## Goal\nFix the flaky test in tests/test_api.py and keep the public API unchanged.\n\n"
    "## Progress\nRead tests/test_api.py; the race is in the fixture teardown of api_client.\n\n"
    "## Next steps\nPatch conftest.py to await the server shutdown, then rerun pytest -k api.\n\n"
    "## Critical context\nThe error was `RuntimeError: Event loop is closed` at teardown.\n"
)
GOAL = "Fix the flaky test in tests/test_api.py; keep the public API unchanged."


def test_a_specific_summary_passes() -> None:
    assert validate(GOOD, GOAL) is None


def test_headings_with_invented_timestamps_fail() -> None:
    stamps = "\n".join(f"{s}\n2024-05-01 12:00:00 - 13:05 UTC" for s in SECTIONS) + " " * 5000
    assert validate(stamps, GOAL) == (
        "the summary's Goal section says nothing of its own (only the prompt's words, headings or "
        "numbers)"
    )


def test_the_prompt_echoed_back_fails() -> None:
    echo = SUMMARY_SYSTEM + "\n" + SUMMARY_SYSTEM
    problem = validate(echo, GOAL)
    assert problem is not None
    assert "says nothing of its own" in problem


def test_a_summary_that_loses_the_request_fails() -> None:
    other = GOOD.replace(
        "Fix the flaky test in tests/test_api.py and keep the public API unchanged.",
        "Migrate the billing service to a new database vendor.",
    )
    assert validate(other, GOAL) == "the summary's Goal section does not carry the user's request"


def test_one_empty_section_fails_and_names_it() -> None:
    empty = re.sub(r"## Next steps\n[^\n]*", "## Next steps\n- \n- ", GOOD)
    assert validate(empty, GOAL) == (
        "the summary's Next steps section says nothing of its own (only the prompt's words, "
        "headings or numbers)"
    )


def test_a_goal_in_chinese_is_carried_by_its_terms() -> None:
    goal = "修复登录页面的测试失败，并且不要改动公开接口"
    assert carries("用户要求：修复登录页面的测试失败，不改动公开接口。", goal)
    assert not carries("把数据库迁移到新的供应商。", goal)


@given(
    st.lists(st.text(min_size=0, max_size=3000), max_size=20),
    st.integers(min_value=256, max_value=4000),
)
def test_chunks_keep_every_character_in_order_and_fit(items: list[str], limit: int) -> None:
    chunks = chunk_items(items, limit)
    assert all(len(c) <= limit for c in chunks)
    # Without the part markers and the joining newlines, the chunks are exactly the items.
    text = re.sub(r"\(part \d+/\d+ of one item\) ", "", "".join(chunks)).replace("\n", "")
    assert text == "".join(items).replace("\n", "")


def test_a_finished_task_may_say_that_nothing_remains() -> None:
    done = re.sub(r"## Next steps\n[^\n]*", "## Next steps\nNothing remains; all done.", GOOD)
    assert validate(done, GOAL) is None


def test_a_summary_of_placeholders_says_too_little() -> None:
    tbd = "## Goal\nFix the flaky test in tests/test_api.py\n\n" + "\n\n".join(
        f"{s}\nTBD soon" for s in SECTIONS[1:]
    )
    problem = validate(tbd, GOAL)
    assert problem is not None
    assert problem.startswith("the summary says too little of its own")
