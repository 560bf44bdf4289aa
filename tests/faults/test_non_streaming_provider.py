"""`bubu run` with a provider that does not stream (the example plugin, installed for real as a
distribution on the path) prints the committed answer."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

PLUGIN = Path(__file__).resolve().parents[2] / "examples" / "plugin" / "bubu_hello.py"


def test_the_answer_of_a_provider_that_does_not_stream_is_printed(tmp_path: Path) -> None:
    site = tmp_path / "site"
    info = site / "bubu_hello-0.1.0.dist-info"
    info.mkdir(parents=True)
    shutil.copyfile(PLUGIN, site / "bubu_hello.py")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: bubu-hello\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(
        "[bubu.providers]\nhello = bubu_hello:provider\n\n[bubu.tools]\nhello = bubu_hello:tools\n"
    )
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    env = {k: v for k, v in os.environ.items() if k != "BUBU_DB"}
    env |= {"PYTHONPATH": path, "BUBU_HOME": str(tmp_path), "BUBU_PLUGINS": "bubu-hello"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bubu",
            "run",
            "say hello",
            "-m",
            "hello:world",
            "-w",
            str(tmp_path),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "The tool says: Hello, world!" in lines
    assert lines[-1] == "● turn completed"
