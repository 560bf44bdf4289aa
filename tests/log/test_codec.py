"""The canonical codec: every kind round-trips, the bytes are canonical, bad bytes are refused."""

from __future__ import annotations

import hashlib
import json
from typing import Any, get_args

import msgspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bubu.errors import CorruptLog, NewerLogError
from bubu.events import (
    Actions,
    Content,
    Event,
    FunctionCall,
    Note,
    SystemNote,
    Text,
    make,
)
from bubu.log import codec
from hypo import examples

from .strategies import ACTIONS, CONTENT, NOTES, events

SETTINGS = settings(max_examples=examples(60), deadline=None)
CONTENT_CLASSES = sorted(CONTENT, key=lambda c: c.__name__)
NOTE_CLASSES = sorted(NOTES, key=lambda c: c.__name__)


def _event(content: Content | None = None, actions: Actions | None = None) -> Event:
    return make(
        session="ses_codec", role="model", author="agent", ts=1, content=content, actions=actions
    )


def _assert_round_trip(ev: Event) -> None:
    data = codec.encode(ev)
    back = codec.decode(data)
    assert back == ev
    assert codec.encode(back) == data


def _sorted_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    assert keys == sorted(keys), f"keys not sorted: {keys}"
    return dict(pairs)


def test_every_kind_and_action_has_a_strategy() -> None:
    assert set(CONTENT) == set(get_args(Content))
    assert set(NOTES) == set(get_args(Note))
    assert set(ACTIONS) == set(Actions.__struct_fields__)


@pytest.mark.parametrize("kind", CONTENT_CLASSES, ids=[c.__name__ for c in CONTENT_CLASSES])
@SETTINGS
@given(data=st.data())
def test_every_content_kind_round_trips(kind: type[msgspec.Struct], data: st.DataObject) -> None:
    _assert_round_trip(_event(content=data.draw(CONTENT[kind])))


@pytest.mark.parametrize("kind", NOTE_CLASSES, ids=[c.__name__ for c in NOTE_CLASSES])
@SETTINGS
@given(data=st.data())
def test_every_note_kind_round_trips(kind: type[msgspec.Struct], data: st.DataObject) -> None:
    _assert_round_trip(_event(content=SystemNote(note=data.draw(NOTES[kind]))))


@pytest.mark.parametrize("name", sorted(ACTIONS))
@SETTINGS
@given(data=st.data())
def test_every_action_round_trips(name: str, data: st.DataObject) -> None:
    actions = Actions(**{name: data.draw(ACTIONS[name])})
    _assert_round_trip(_event(actions=actions))


@SETTINGS
@given(ev=events())
def test_any_event_round_trips_in_canonical_form(ev: Event) -> None:
    data = codec.encode(ev)
    _assert_round_trip(ev)
    text = data.decode("utf-8")  # strict: the bytes are valid UTF-8
    json.loads(text, object_pairs_hook=_sorted_pairs)  # keys sorted at every level


def test_canonical_bytes_are_exactly_these() -> None:
    # Golden bytes: the digest covers them, so they may never change for a written event.
    ev = make(
        session="ses_1",
        role="model",
        author="agent",
        ts=7,
        id="evt_1",
        content=FunctionCall(call_id="c1", name="grep", arguments={"z": 1, "a": [True, None, 0.5]}),
    )
    assert codec.encode(ev) == (
        b'{"author":"agent","content":{"arguments":{"a":[true,null,0.5],"z":1},"call_id":"c1",'
        b'"kind":"function_call","name":"grep"},"id":"evt_1","role":"model","session":"ses_1",'
        b'"ts":7,"v":1}'
    )


def test_defaults_are_omitted_but_the_version_is_not() -> None:
    data = codec.encode(_event(content=Text(text="x")))
    obj = json.loads(data)
    assert obj["v"] == 1
    assert "visibility" not in obj
    assert "turn" not in obj
    assert "actions" not in obj


def test_digests_do_not_depend_on_key_order() -> None:
    assert codec.args_digest({"a": 1, "b": [2, {"y": 1, "x": 0}]}) == codec.args_digest(
        {"b": [2, {"x": 0, "y": 1}], "a": 1}
    )
    assert codec.canonical_json({"b": 1, "a": "é"}) == '{"a":"é","b":1}'.encode()


def test_chain_is_sha256_of_previous_and_payload() -> None:
    assert codec.chain(codec.GENESIS, b"abc") == hashlib.sha256(bytes(32) + b"abc").digest()
    assert len(codec.GENESIS) == 32


def test_non_json_is_a_corrupt_log() -> None:
    with pytest.raises(CorruptLog, match="at seq 5 is not valid JSON"):
        codec.decode(b'{"v":1,', seq=5)


def test_no_version_is_a_corrupt_log() -> None:
    with pytest.raises(CorruptLog, match="no schema version"):
        codec.decode(b'{"author":"user"}')


def test_a_newer_version_is_refused_with_a_clear_message() -> None:
    obj = json.loads(codec.encode(_event(content=Text(text="from the future"))))
    obj["v"] = 2
    obj["content"] = {"kind": "hologram", "frames": 3}
    with pytest.raises(
        NewerLogError, match=r"at seq 3 was written by a newer Bubu \(schema 2"
    ) as e:
        codec.decode(json.dumps(obj).encode(), seq=3)
    assert "upgrade Bubu" in str(e.value)


def test_a_version_nobody_wrote_is_corrupt() -> None:
    obj = json.loads(codec.encode(_event(content=Text(text="x"))))
    obj["v"] = 0
    with pytest.raises(CorruptLog, match="schema 0, which no Bubu ever wrote"):
        codec.decode(json.dumps(obj).encode())


def test_an_unknown_kind_is_named() -> None:
    obj = json.loads(codec.encode(_event(content=Text(text="x"))))
    obj["content"] = {"kind": "hologram", "frames": 3}
    with pytest.raises(CorruptLog, match="unknown event kind 'hologram'"):
        codec.decode(json.dumps(obj).encode(), seq=9)


def test_a_known_kind_with_a_missing_field_is_not_called_unknown() -> None:
    obj = json.loads(codec.encode(_event(content=Text(text="x"))))
    del obj["content"]["text"]
    with pytest.raises(CorruptLog, match="at seq 4 cannot be read") as e:
        codec.decode(json.dumps(obj).encode(), seq=4)
    assert "unknown event kind" not in str(e.value)
    assert "text" in str(e.value)


@SETTINGS
@given(
    text=st.lists(st.text(max_size=4) | st.characters(categories=["Cs"]), max_size=8).map("".join)
)
@example(text="a\ud800b\udfff")
def test_sanitize_text_replaces_lone_surrogates_with_the_replacement_character(text: str) -> None:
    clean = codec.sanitize_text(text)
    clean.encode("utf-8")  # never raises
    assert len(clean) == len(text)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        assert clean != text
        for c, d in zip(text, clean, strict=True):
            assert c == d or (0xD800 <= ord(c) <= 0xDFFF and d == "\ufffd")
    else:
        assert clean is text or clean == text
    assert codec.decode(codec.encode(_event(content=Text(text=clean)))).content == Text(text=clean)
