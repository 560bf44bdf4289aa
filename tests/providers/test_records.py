"""One record per built-in provider (`bubu.providerfacts`): the tables the plugins, the settings
and the pricing read are made from it and agree with each other."""

from __future__ import annotations

from bubu import plugins, pricing, providerfacts
from bubu.engine import settings
from bubu.providers import PROVIDERS


def test_every_table_is_made_from_the_records() -> None:
    records = providerfacts.BUILTIN_PROVIDERS
    assert tuple(r.name for r in records) == PROVIDERS
    assert dict(plugins.BUILTINS["bubu.providers"]) == {r.name: r.factory for r in records}
    assert dict(settings.SERVER_PROVIDERS) == {
        r.name: r.base_url_env for r in records if r.base_url_env
    }
    assert dict(pricing.PRICED_PROVIDERS) == {r.name: r.pricing_id for r in records if r.pricing_id}
    assert {"api.openai.com", "api.anthropic.com"} == providerfacts.OFFICIAL_HOSTS


def test_each_record_names_a_factory_that_loads_and_a_priced_one_has_its_official_host() -> None:
    import importlib

    for r in providerfacts.BUILTIN_PROVIDERS:
        module, _, attr = r.factory.partition(":")
        assert callable(getattr(importlib.import_module(module), attr))
        assert (r.pricing_id is None) == (r.official_host is None), r.name
        assert r.pricing_id is None or r.base_url_env is not None, r.name
