"""A model's context window and where the figure came from.

A local server says what it serves: llama.cpp's server (`GET /props`), Ollama (`POST /api/show`,
`GET /api/ps`), vLLM (`GET /v1/models`, `max_model_len`), LM Studio (`GET /api/v0/models`). A
hosted model's window comes from the `genai-prices` table (the one the prices come from). A model
nobody knows gets `UNKNOWN_WINDOW`, said as such: too small a guess only compacts early, too large
a one lets requests overflow the server.

Probes use short timeouts and never raise; a provider asks once per run.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import msgspec

from bubu.windowfacts import LEARNED, UNKNOWN, UNKNOWN_WINDOW, USER, Window, learned

if TYPE_CHECKING:
    import httpx2

OLLAMA_DEFAULT_NUM_CTX = 4096
"""What Ollama serves when neither the model's parameters nor the request set `num_ctx`."""
PROBE_TIMEOUT_S = 2.0


# ---- hosted models: the genai-prices table ---------------------------------------------------


@functools.lru_cache(maxsize=256)
def hosted_window(provider_id: str, model: str) -> Window | None:
    """The window `genai-prices` states for `model` at `provider_id` ("openai", "anthropic").

    Loading the table builds thousands of validated objects (a quarter of a second of CPU), so
    what it said is kept in `$BUBU_HOME/cache/windows.json`, keyed by the table's version; a
    process that has the table loaded already asks the table."""
    if "genai_prices" in sys.modules:
        return _table_window(provider_id, model)
    cache = _WindowCache.open()
    if cache is None:
        return _table_window(provider_id, model)
    key = f"{provider_id}/{model}"
    if key in cache.entries:
        tokens = cache.entries[key]
        return Window(tokens, "genai-prices table") if tokens else None
    found = _table_window(provider_id, model)
    cache.entries[key] = found.tokens if found is not None else 0
    cache.save()
    return found


class _WindowCache(msgspec.Struct):
    path: Path
    version: str
    entries: dict[str, int]

    @classmethod
    def open(cls) -> _WindowCache | None:
        """The cache for the installed table (empty when absent, stale or unreadable); None
        when the table's version cannot be told."""
        try:
            spec = importlib.util.find_spec("genai_prices")
            origin = Path(spec.origin or "") if spec is not None else None
            if origin is None:
                return None
            stat = (origin.parent / "data.py").stat()
        except (OSError, ImportError, ValueError):
            return None
        version = f"{origin.parent}:{stat.st_size}:{stat.st_mtime_ns}"
        home = Path(os.environ.get("BUBU_HOME") or Path.home() / ".bubu").expanduser()
        path = home / "cache" / "windows.json"
        entries: dict[str, int] = {}
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(saved, dict) and saved.get("table") == version:
                got = saved.get("windows")
                if isinstance(got, dict):
                    entries = {k: v for k, v in got.items() if type(v) is int and v >= 0}
        except (OSError, ValueError):
            pass
        return cls(path, version, entries)

    def save(self) -> None:
        """Write the cache (atomically; a failure only means asking the table next time)."""
        data = json.dumps({"table": self.version, "windows": self.entries}, sort_keys=True)
        try:
            from bubu.log import make_home

            make_home(self.path.parent.parent)  # $BUBU_HOME: 0700 when this creates it
            self.path.parent.mkdir(exist_ok=True)
            temp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
            temp.write_text(data, encoding="utf-8")
            os.replace(temp, self.path)
        except OSError:
            pass


def _table_window(provider_id: str, model: str) -> Window | None:
    try:
        from genai_prices import data_snapshot

        _, found = data_snapshot.get_snapshot().find_provider_model(model, None, provider_id, None)
    except Exception:  # any failure of the catalogue means "not known"
        return None
    size = getattr(found, "context_window", None)
    if isinstance(size, int) and size > 0:
        return Window(size, "genai-prices table")
    return None


# ---- local servers ---------------------------------------------------------------------------


def _root(base_url: str) -> str:
    """The server's root: the base URL without a trailing ``/v1``."""
    parts = urlsplit(base_url.rstrip("/"))
    path = parts.path[:-3] if parts.path.endswith("/v1") else parts.path
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _positive(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and value > 0:
        return value
    if isinstance(value, float) and value.is_integer() and value > 0:
        return int(value)
    return None


def _json(response: httpx2.Response) -> Any:
    if response.status_code != 200:
        return None
    try:
        return response.json()
    except ValueError:
        return None


def _llama_cpp(client: httpx2.Client, root: str, model: str) -> Window | None:
    body = _json(client.get(f"{root}/props"))
    if not isinstance(body, dict):
        return None
    settings = body.get("default_generation_settings")
    n_ctx = _positive(settings.get("n_ctx")) if isinstance(settings, dict) else None
    n_ctx = n_ctx or _positive(body.get("n_ctx"))
    return Window(n_ctx, "llama.cpp /props") if n_ctx else None


_NUM_CTX = re.compile(r"^\s*num_ctx\s+(\d+)\s*$", re.MULTILINE)


def _ollama(client: httpx2.Client, root: str, model: str) -> Window | None:
    # Only a GET before anything is posted: a server that is not Ollama is asked nothing else.
    version = _json(client.get(f"{root}/api/version"))
    if not isinstance(version, dict) or "version" not in version:
        return None
    body = _json(client.post(f"{root}/api/show", json={"model": model}))
    if not isinstance(body, dict) or "model_info" not in body:
        return None
    info = body.get("model_info")
    most = None
    if isinstance(info, dict):
        most = next(
            (
                _positive(v)
                for k, v in info.items()
                if k.endswith(".context_length") and _positive(v)
            ),
            None,
        )
    # A loaded model says what it runs with; else the Modelfile's num_ctx; else Ollama's default.
    running = _ollama_running(client, root, model)
    if running:
        return Window(running, "Ollama /api/ps")
    params = body.get("parameters")
    found = _NUM_CTX.search(params) if isinstance(params, str) else None
    if found:
        return Window(int(found.group(1)), "Ollama /api/show num_ctx")
    served = min(OLLAMA_DEFAULT_NUM_CTX, most) if most else OLLAMA_DEFAULT_NUM_CTX
    allows = f"; the model allows {most:,}" if most and most > served else ""
    return Window(served, f"Ollama's default num_ctx{allows}")


def _ollama_running(client: httpx2.Client, root: str, model: str) -> int | None:
    import httpx2

    try:
        body = _json(client.get(f"{root}/api/ps"))
    except httpx2.HTTPError:
        return None
    models = body.get("models") if isinstance(body, dict) else None
    for entry in models if isinstance(models, list) else ():
        if isinstance(entry, dict) and model in (entry.get("name"), entry.get("model")):
            return _positive(entry.get("context_length"))
    return None


def _pick(data: object, model: str) -> dict[str, Any] | None:
    entries = [e for e in data if isinstance(e, dict)] if isinstance(data, list) else []
    for entry in entries:
        if entry.get("id") == model:
            return entry
    return entries[0] if len(entries) == 1 else None


def _listed(client: httpx2.Client, url: str, model: str) -> dict[str, Any] | None:
    # The entry for `model` in the `data` list a models endpoint answers with.
    body = _json(client.get(url))
    return _pick(body.get("data") if isinstance(body, dict) else None, model)


def _lm_studio(client: httpx2.Client, root: str, model: str) -> Window | None:
    entry = _listed(client, f"{root}/api/v0/models", model)
    if entry is None:
        return None
    loaded = _positive(entry.get("loaded_context_length"))
    if loaded:
        return Window(loaded, "LM Studio /api/v0/models loaded_context_length")
    most = _positive(entry.get("max_context_length"))
    return Window(most, "LM Studio /api/v0/models max_context_length") if most else None


def _models_list(client: httpx2.Client, base: str, model: str) -> Window | None:
    entry = _listed(client, f"{base}/models", model)
    if entry is None:
        return None
    vllm = _positive(entry.get("max_model_len"))
    if vllm:
        return Window(vllm, "vLLM /v1/models max_model_len")
    other = _positive(entry.get("context_length")) or _positive(entry.get("context_window"))
    return Window(other, "/v1/models context_length") if other else None


_PROBES = (_llama_cpp, _ollama, _lm_studio)


def served_window(
    base_url: str, model: str, *, timeout_s: float = PROBE_TIMEOUT_S
) -> Window | None:
    """The window the server at `base_url` serves `model` with, or None when it does not say.

    Every failure (refused, timed out, a 404, a body of another shape) only means this server
    did not say. The provider asks once and keeps the answer for its run: a server restarted
    with another window is asked again by the next run.
    """
    return _probe(base_url.rstrip("/"), model, timeout_s)


def _probe(base: str, model: str, timeout_s: float) -> Window | None:
    import httpx2

    root = _root(base)
    try:
        client = httpx2.Client(timeout=httpx2.Timeout(timeout_s), follow_redirects=False)
    except Exception:  # no client, no probe: the window stays unknown
        return None
    with client:
        for probe in (*_PROBES, None):
            try:
                if probe is None:
                    found = _models_list(client, base, model)
                else:
                    found = probe(client, root, model)
            except (httpx2.ConnectError, httpx2.ConnectTimeout):
                return None  # nobody listens there: the other probes would only wait too
            except (httpx2.HTTPError, ValueError, TypeError):
                found = None
            if found is not None:
                return found
    return None


def find_window(*, base_url: str, model: str, official: bool, vendor: str) -> Window:
    """The window of a provider the user gave none: the server's own word (away from the
    official API), else the `genai-prices` table's for `vendor`, else `UNKNOWN_WINDOW` said as
    unknown. The same default on every wire; a source is named only when it stated the figure."""
    found = None if official else served_window(base_url, model)
    if found is None:
        found = hosted_window(vendor, model)
    return found or Window(UNKNOWN_WINDOW, UNKNOWN)


# ---- what an overflow error says ------------------------------------------------------------

_ERROR_WINDOWS = (
    # llama-server: "request (4476 tokens) exceeds the available context size (4096 tokens)"
    re.compile(r"available context size \((\d+) tokens\)"),
    # vLLM and OpenAI: "This model's maximum context length is 4096 tokens."
    re.compile(r"maximum context length is (\d+) tokens"),
    # llama-cpp-python: "Requested tokens (5000) exceed context window of 4096"
    re.compile(r"exceed context window of (\d+)"),
)


def window_in_error(body: object) -> int | None:
    """The served window an overflow error states: llama-server's `n_ctx` field, else a number
    in the message of llama-server, vLLM or llama-cpp-python."""
    error = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(error, dict):
        n_ctx = _positive(error.get("n_ctx"))
        if n_ctx:
            return n_ctx
        error = error.get("message")
    if not isinstance(error, str):
        return None
    for pattern in _ERROR_WINDOWS:
        found = pattern.search(error)
        if found:
            return int(found.group(1))
    return None


__all__ = [
    "LEARNED",
    "OLLAMA_DEFAULT_NUM_CTX",
    "UNKNOWN",
    "UNKNOWN_WINDOW",
    "USER",
    "Window",
    "find_window",
    "hosted_window",
    "learned",
    "served_window",
    "window_in_error",
]
