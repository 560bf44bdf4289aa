"""What a model call cost in US dollars, from its token usage and the `genai-prices` table.

The price is computed when the call's usage is committed, so the log says what was charged at
that time's prices. A price the user configured (`[prices."provider:model"]`, per million
tokens) wins over the table and applies at any server (a local one, a proxy); a model neither
knows (scripted, a local server) has no price (None), which every view shows as "price
unknown", never as $0.00.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import msgspec

from bubu.providerfacts import PRICING_IDS

if TYPE_CHECKING:
    from bubu.messages import Usage

PRICED_PROVIDERS = PRICING_IDS
"""Bubu's provider names, by the `genai-prices` provider id their official APIs are priced as
(their records, `bubu.providerfacts`)."""


class Price(msgspec.Struct, frozen=True, kw_only=True):
    """A configured price in USD per million tokens: input (not cached), output, cache reads and
    cache writes (the last two default to the input price)."""

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None

    def cost(self, inp: int, out: int, read: int, write: int) -> float:
        """The cost of a call's tokens (`inp` counts all input, reads and writes included)."""
        fresh = max(0, inp - read - write)
        rate_read = self.input if self.cache_read is None else self.cache_read
        rate_write = self.input if self.cache_write is None else self.cache_write
        total = fresh * self.input + out * self.output + read * rate_read + write * rate_write
        return total / 1_000_000


_CONFIGURED: dict[str, Price] = {}


def configure(prices: Mapping[str, Price]) -> None:
    """Use these prices (by model spec, ``provider:model``) from now on, before the table."""
    _CONFIGURED.clear()
    _CONFIGURED.update(prices)


def configure_from(table: object) -> None:
    """Use the prices of a config file's checked `prices` table (None: none configured)."""
    rows = table if isinstance(table, dict) else {}
    configure({spec: Price(**row) for spec, row in rows.items()})


def configured(spec: str) -> Price | None:
    """The price the user configured for `spec`, if any."""
    return _CONFIGURED.get(spec)


def known(spec: str, *, official: bool = True) -> bool:
    """Whether calls of `spec` get a price (configured, or the table's at the official API)."""
    return call_cost(spec, input_tokens=1, output_tokens=1, official=official) is not None


def call_cost(
    spec: str,
    *,
    input_tokens: int,
    output_tokens: int,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
    official: bool = True,
    cache_write_1h_tokens: int = 0,
) -> float | None:
    """The cost of one call of model `spec` (``provider:model``) in USD, or None if unknown.

    `input_tokens` counts all input, cache reads and writes included (as Bubu records it);
    `official` is false for a server other than the provider's own API, whose prices are unknown.
    `cache_write_1h_tokens` are the part of the cache writes kept for an hour (priced higher).
    """
    mine = _CONFIGURED.get(spec)
    if mine is not None:
        return mine.cost(input_tokens, output_tokens, cache_read_tokens, cache_write_tokens)
    name, _, model = spec.partition(":")
    provider = PRICED_PROVIDERS.get(name)
    if provider is None or not official or not model:
        return None
    tokens = (input_tokens, output_tokens, cache_read_tokens, cache_write_tokens)
    return _price(provider, model, tokens, min(cache_write_1h_tokens, cache_write_tokens))


def usage_cost(spec: str, usage: Usage, *, official: bool = True) -> float | None:
    """`call_cost` of one call's `Usage` (cache reads, writes and one-hour writes included)."""
    return call_cost(
        spec,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        cache_write_1h_tokens=usage.cache_write_1h_tokens,
        official=official,
    )


@functools.lru_cache(maxsize=4096)
def _price(
    provider: str, model: str, tokens: tuple[int, int, int, int], write_1h: int = 0
) -> float | None:
    from genai_prices import Usage, calc_price

    inp, out, read, write = tokens
    usage = Usage(
        input_tokens=inp, output_tokens=out, cache_read_tokens=read, cache_write_tokens=write
    )
    if write_1h:
        usage = Usage(
            input_tokens=inp,
            output_tokens=out,
            cache_read_tokens=read,
            cache_write_tokens=write,
            cache_write_1h_tokens=write_1h,
        )
    try:
        with warnings.catch_warnings():
            # The table warns about usage it cannot price in detail; the total is still right.
            warnings.simplefilter("ignore")
            result = calc_price(usage, model, provider_id=provider)
    except (LookupError, ValueError):
        return None
    return float(result.total_price)


def warm(spec: str) -> None:
    """Load the price table in the background (about a second), so the first call's commit
    does not wait for it; a no-op for models that are never priced."""
    if spec.partition(":")[0] not in PRICED_PROVIDERS or spec in _CONFIGURED:
        return
    import threading

    def load() -> None:
        call_cost(spec, input_tokens=1, output_tokens=1)

    threading.Thread(target=load, name="bubu-prices", daemon=True).start()


def format_usd(cost: float | None) -> str:
    """A cost for people: ``$0.0123``, ``$4.56``, or ``price unknown``."""
    if cost is None:
        return "price unknown"
    return f"${cost:,.4f}" if cost < 1 else f"${cost:,.2f}"


class CostTally(msgspec.Struct):
    """The running cost of a set of calls: a known sum, and whether some calls had no price."""

    usd: float = 0.0
    priced_calls: int = 0
    unpriced_calls: int = 0
    by_model: dict[str, ModelCost] = msgspec.field(default_factory=dict)
    priced: bool = False
    """Whether the model in use has a price: before any call, $0 is said only then."""

    def add(self, model: str, cost: float | None, tokens_in: int, tokens_out: int) -> None:
        """Count one call."""
        m = self.by_model.setdefault(model, ModelCost())
        m.calls += 1
        m.input_tokens += tokens_in
        m.output_tokens += tokens_out
        if cost is None:
            self.unpriced_calls += 1
            m.unpriced_calls += 1
        else:
            self.usd += cost
            self.priced_calls += 1
            m.usd += cost

    @property
    def total(self) -> float | None:
        """The total in USD; None when no call had a price (an unknown total is not $0)."""
        return self.usd if self.priced_calls else None

    def text(self) -> str:
        """The total for people, saying when part of it is unknown."""
        if not self.priced_calls:
            return "$0" if self.priced and not self.unpriced_calls else "price unknown"
        partial = f" (+{self.unpriced_calls} calls of unknown price)" if self.unpriced_calls else ""
        return format_usd(self.usd) + partial

    def json(self) -> dict[str, object]:
        """The tally as `--json` prints it."""
        return {
            "cost_usd": self.total,
            "cost_known": self.unpriced_calls == 0 and self.priced_calls > 0,
            "unpriced_calls": self.unpriced_calls,
            "by_model": {k: v.json() for k, v in self.by_model.items()},
        }


class ModelCost(msgspec.Struct):
    """One model's share of a tally."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    usd: float = 0.0
    unpriced_calls: int = 0

    def json(self) -> dict[str, object]:
        """The share as `--json` prints it (cost None: unknown)."""
        priced = self.calls - self.unpriced_calls
        return {
            "calls": self.calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.usd if priced else None,
            "unpriced_calls": self.unpriced_calls,
        }


def tally(usages: Iterable[tuple[str, float | None, int, int]]) -> CostTally:
    """A tally of (model, cost, input tokens, output tokens) rows."""
    t = CostTally()
    for row in usages:
        t.add(*row)
    return t
