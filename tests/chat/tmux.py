"""A real terminal for `bubu chat`: a tmux pane (120×40) on a tmux server of the test's own,
driven with `send-keys` and read with `capture-pane`, as a person types and reads."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from engine.cli import bubu_env

TMUX = "/usr/bin/tmux"
EXITED = "[bubu exited "


class Pane:
    """`bubu ARGS` running in a tmux pane; the pane stays after bubu exits, saying its status."""

    def __init__(
        self,
        root: Path,
        db: Path,
        *args: str,
        cwd: Path,
        env: dict[str, str],
        stderr: Path | None = None,
    ) -> None:
        self.socket = f"bubu-chat-test-{os.getpid()}-{id(self)}"
        self.target = "chat"
        script = root / f"pane-{id(self)}.sh"
        exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
        command = shlex.join([sys.executable, "-m", "bubu", "--db", str(db), *args])
        if stderr is not None:
            command += f" 2>{shlex.quote(str(stderr))}"
        script.write_text(
            f"unset $(env | sed -n 's/^\\(BUBU_[A-Z_]*\\)=.*/\\1/p')\n{exports}"
            f"cd {shlex.quote(str(cwd))}\n{command}\necho '{EXITED}'$?']'\nexec sleep 3600\n"
        )
        self._tmux(
            "new-session",
            "-d",
            "-s",
            self.target,
            "-x",
            "120",
            "-y",
            "40",
            f"bash --norc --noprofile {shlex.quote(str(script))}",
        )

    def _tmux(self, *args: str) -> str:
        done = subprocess.run(
            [TMUX, "-L", self.socket, "-f", "/dev/null", *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return done.stdout

    def type(self, text: str, *, enter: bool = True) -> None:
        """Type `text` literally (then Enter)."""
        self._tmux("send-keys", "-t", self.target, "-l", text)
        if enter:
            self.keys("Enter")

    def keys(self, *names: str) -> None:
        """Press keys by tmux name: Enter, C-c, C-d, Tab."""
        self._tmux("send-keys", "-t", self.target, *names)

    def screen(self) -> str:
        """What the pane shows, with what scrolled off above it."""
        return self._tmux("capture-pane", "-p", "-J", "-S", "-500", "-t", self.target)

    def wait(self, what: str | Callable[[str], bool], timeout_s: float = 60.0) -> str:
        """Poll the screen until it shows `what` (or the predicate holds); the screen."""
        check = what if callable(what) else (lambda s: what in s)
        deadline = time.monotonic() + timeout_s
        while True:
            shown = self.screen()
            if check(shown):
                return shown
            if time.monotonic() > deadline or (EXITED in shown and what != EXITED):
                raise AssertionError(f"the screen never showed {what!r}; it shows:\n{shown}")
            time.sleep(0.05)

    def prompt_count(self) -> int:
        """How many prompts (`› ` at a line's start) the screen shows."""
        return sum(1 for ln in self.screen().splitlines() if ln.startswith("› "))

    def wait_prompt(self, after: int, timeout_s: float = 60.0) -> str:
        """Wait for a fresh, empty prompt: more than `after` prompts, the last one empty."""

        def ready(shown: str) -> bool:
            prompts = [ln for ln in shown.splitlines() if ln.startswith("›")]
            return len(prompts) > after and prompts[-1].strip() == "›"

        return self.wait(ready, timeout_s)

    def exit_status(self, timeout_s: float = 30.0) -> int:
        """Wait for bubu to exit; its exit status."""
        shown = self.wait(EXITED, timeout_s)
        tail = shown[shown.rindex(EXITED) + len(EXITED) :]
        return int(tail.split("]", 1)[0])

    def close(self) -> None:
        """End the test's tmux server (and with it the pane)."""
        subprocess.run(
            [TMUX, "-L", self.socket, "kill-server"], capture_output=True, timeout=30, check=False
        )


def chat_env(home: Path) -> dict[str, str]:
    """The variables a pane's bubu runs with: a clean BUBU_HOME, a plain UTF-8 terminal."""
    env = {k: v for k, v in bubu_env(home).items() if k.startswith("BUBU_")}
    env.update({"TERM": "xterm-256color", "LANG": "C.UTF-8"})
    if os.environ.get("PYTHONPATH"):  # the tree under test, as for every other subprocess
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env
