"""The store's search for values of a known shape runs only the patterns whose leading literal the
bytes hold, found in one pass (`secretvalues._Scanner`): it must never skip a pattern that would
match, and it finds what searching every pattern finds."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bubu import secretvalues
from hypo import examples
from redaction.test_values import ORDINARY_VALUES, RANDOM, SECRET_VALUES

LITERALS = sorted({lit for lit, _ in secretvalues._NEEDLES})
TOKEN = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_./:=")
PIECES = st.one_of(
    st.sampled_from(LITERALS),
    st.sampled_from(SECRET_VALUES + ORDINARY_VALUES),
    TOKEN,
    st.text(max_size=20),
    st.sampled_from(['"', " ", "\\n", "\n", "{", "}", ":", ","]),
)


def _every_pattern(data: bytes) -> str | None:
    for i, p in enumerate(secretvalues.PATTERNS):
        if secretvalues._data_re(i).search(data) is not None:
            return p.kind
    return None


@settings(max_examples=examples(400), deadline=None)
@given(st.lists(PIECES, max_size=30))
def test_the_scan_never_skips_a_pattern_that_matches(pieces: list[str]) -> None:
    data = "".join(pieces).encode("utf-8", "surrogatepass")
    scanner = secretvalues._scanner()
    assert scanner is not None  # the wheel is a dependency: installed wherever Bubu is
    candidates = set(scanner.candidates(data))
    for i in range(len(secretvalues.PATTERNS)):
        if secretvalues._data_re(i).search(data) is not None:
            assert i in candidates, secretvalues.PATTERNS[i].kind
    assert secretvalues.search(data) == _every_pattern(data)


SHAPED = [v for v in SECRET_VALUES if v != RANDOM]
"""The secrets of a known shape (the store does not judge entropy: `RANDOM` is not one)."""


@pytest.mark.parametrize("value", SHAPED)
def test_each_secret_is_found_with_and_without_the_scan(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = b'{"result":"before ' + value.encode() + b' after"}'
    found = secretvalues.search(data)
    assert found is not None
    monkeypatch.setattr(secretvalues, "_scanner", lambda: None)  # as without the wheel
    assert secretvalues.search(data) == found


def test_text_without_any_literal_runs_only_the_patterns_searched_always() -> None:
    scanner = secretvalues._scanner()
    assert scanner is not None
    data = b"plain words and numbers 12345, nothing else" * 50
    assert scanner.candidates(data) == scanner.always
    assert all(len(secretvalues._NEEDLES[i][1]) < 2 for i in scanner.always)


def test_a_large_text_is_searched_by_every_pattern(monkeypatch: pytest.MonkeyPatch) -> None:
    # The scan lists every occurrence of every literal: a text that repeats one would make a
    # list as long as itself, so a text above SCAN_UNDER is searched without it.
    scanner = secretvalues._scanner()
    assert scanner is not None
    asked: list[int] = []
    monkeypatch.setattr(type(scanner), "candidates", lambda self, data: asked.append(len(data)))
    hostile = b"gh" * (secretvalues.SCAN_UNDER // 2) + b" " + SHAPED[0].encode()
    assert secretvalues.search(hostile) == _every_pattern(hostile) is not None
    assert asked == []
