"""Every error Bubu raises, in one tree.

    BubuError                      root; `str(err)` is one sentence: what happened and what to do
    ├── ConfigError                bad option, unknown model spec, missing API key
    ├── LogError                   anything about the durable log
    │   ├── AppendConflict         the session moved on since the writer last read it
    │   ├── CorruptLog             the chain, a row or the database file is damaged
    │   ├── NewerLogError          written by a newer Bubu; never misread
    │   ├── LeaseError             the session is held by another runner
    │   │   └── LeaseLost          this runner's lease was taken over (fenced)
    │   ├── StorageError           the database could not be opened or written
    │   └── UnknownSession
    ├── ProviderError              a model call failed (status, body)
    ├── HookBlocked                a UserPromptSubmit hook refused the request
    └── ToolError                  a tool could not run; the model sees it as a result

Failures the model should see are events, not exceptions: a tool failure becomes an error
function_response, a provider failure an `error` event. Exceptions are for the host.
"""

from __future__ import annotations


class BubuError(Exception):
    """Root of every error Bubu raises on purpose."""

    exit_code = 1


class ConfigError(BubuError):
    """An option, a model spec or the environment is not usable as given."""

    exit_code = 2


class LogError(BubuError):
    """Something about the durable log."""


class AppendConflict(LogError):
    """An append named a high-water that is no longer the session's head."""

    def __init__(self, session: str, expected: int, actual: int) -> None:
        self.session, self.expected, self.actual = session, expected, actual
        super().__init__(
            f"session {session} moved on (expected high-water {expected}, found {actual}); "
            "re-read the log and retry"
        )


class CorruptLog(LogError):
    """The log does not verify: a broken chain, a damaged row or a damaged database file."""

    def __init__(self, message: str, *, session: str | None = None, seq: int | None = None) -> None:
        self.session, self.seq = session, seq
        super().__init__(message)


class NewerLogError(LogError):
    """The log or database was written by a newer Bubu than this one."""


class LeaseError(LogError):
    """The session is leased by another runner."""


class LeaseLost(LeaseError):
    """This runner's lease was taken over; it must stop writing."""


class StorageError(LogError):
    """The database could not be opened, read or written."""


class UnknownSession(LogError):
    """No session with that id (or prefix) exists."""


class ProviderError(BubuError):
    """A model provider call failed."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        body: str | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
        error_class: str = "provider_error",
    ) -> None:
        self.status, self.body, self.retryable = status, body, retryable
        self.retry_after, self.error_class = retry_after, error_class
        self.served_window: int | None = None
        """The window a context-overflow error says the server serves, when it says."""
        self.repeats_for_the_request = False
        """A fault of the server that the same request is likely to get every time (a local
        server's 500): when it comes back word for word, waiting does not help."""
        self.server_up = False
        """The server answered another request after this failure: it is up, so a failure that
        repeats word for word is about this request, not an outage."""
        super().__init__(message)


class HookBlocked(BubuError):
    """A UserPromptSubmit hook refused the user's request: it was not sent (the hook's run is
    in the log)."""

    exit_code = 2


class ToolError(BubuError):
    """A tool could not do what it was asked; the message is shown to the model."""
