"""A secret's value never reaches a repr, a log line or a traceback that prints one."""

from __future__ import annotations

from bubu import secrets


def test_a_secrets_repr_names_it_and_hides_its_value() -> None:
    value = "sk-live-4c1d8e0f7a9b2c3d"
    secrets.reset({"SERVICE_API_KEY": value})
    try:
        known = [s for s in secrets.known() if s.name == "SERVICE_API_KEY"]
        assert [s.value for s in known] == [value]
        shown = repr(known) + str(known[0]) + f"{known[0]!r}"
        assert "SERVICE_API_KEY" in shown
        assert value not in shown
    finally:
        secrets.reset()
