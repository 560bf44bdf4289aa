"""A read-only runner for looking at a session: what its next model request would be.

Both `bubu context` and the web UI's context tab use it, so they show exactly what a real run
would send: the same projection, checkpoint, placeholders and digest. It holds no lease (a fake
one it never uses), appends nothing and calls no model.
"""

from __future__ import annotations

from bubu.engine.driver import RunConfig, Runner
from bubu.errors import ConfigError
from bubu.log.store import Lease, SessionInfo, Store
from bubu.messages import DeltaSink, ModelRequest, ModelResponse

DEFAULT_WINDOW = 200_000


class InspectModel:
    """The session's model as far as projecting a request needs it: its spec and its window.

    No provider is built, so inspecting needs no API key and opens no connection.
    """

    def __init__(self, spec: str, window: int | None = None) -> None:
        self._spec = spec
        self._window = window

    @property
    def spec(self) -> str:
        """The model spec."""
        return self._spec

    @property
    def context_window(self) -> int:
        """The window the caller gave, else the provider's own if it can be built here."""
        if self._window is not None:
            return self._window
        from bubu.errors import BubuError
        from bubu.providers import resolve

        try:
            return resolve(self._spec).context_window
        except BubuError:
            return DEFAULT_WINDOW

    def complete(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        """Never called: inspecting does not call the model."""
        raise ConfigError("this runner only inspects the next request; it does not send it")


def inspect_runner(store: Store, info: SessionInfo, *, context_window: int | None = None) -> Runner:
    """A Runner folded to the session's head, for building (not sending) its next request."""
    from bubu.tools import host_tools

    lease = Lease(session=info.id, owner="inspect", epoch=-1, expires_ms=0)
    return Runner(
        store=store,
        session=info,
        provider=InspectModel(info.model or "scripted:-", context_window),
        tools=host_tools(None),
        lease=lease,
        config=RunConfig(context_window=context_window),
    )
