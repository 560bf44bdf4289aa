"""The web UI: an ASGI app over the projections of the log, with live updates and actions.

`create_app(store, token=…)` builds it; `bubu ui` serves it with uvicorn on 127.0.0.1. The page
and its assets live in `static/` inside the package (plain HTML, CSS and JavaScript, no build).
"""

from __future__ import annotations

from bubu.web.app import create_app, dismiss_notice
from bubu.web.auth import new_token

__all__ = ["create_app", "dismiss_notice", "new_token"]
