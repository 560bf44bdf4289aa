"""Peak memory of `bubu import` on a large export, and of a scripted model given `/dev/zero`.

Builds an export of about `--mb` megabytes (the step events of `bench/append.py`: a call and a
2 KB result per step), then runs `bubu import` on it in a child process and reads the child's
peak resident set size from `resource.getrusage(RUSAGE_CHILDREN)`. The child's address space is
capped at 3 GiB, so a run that would grow without bound ends with a MemoryError instead.
`--src DIR` runs another tree's Bubu (e.g. the previous release's `src`) for a baseline.

Usage: python bench/import_memory.py [--mb 150] [--src DIR] [--dir DIR].
Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from append import step_events  # type: ignore[import-not-found]  # a sibling script
from bubu.log.sqlite import SQLiteStore
from bubu.log.transfer import export_lines


def build_export(path: Path, mb: int, work: Path) -> int:
    """An export of about `mb` MB; returns its event count."""
    db = work / "source.db"
    with SQLiteStore(db) as store:
        info = store.create_session(title="big", workspace="/w")
        head, n = 0, 0
        while db.stat().st_size < mb * 1_000_000 * 1.2:
            batch = [ev for i in range(n, n + 2000) for ev in step_events(info.id, i)]
            head = store.append(info.id, batch, expect=head).high_water
            n += 2000
        with path.open("wb") as f:
            for line in export_lines(store, store.session(info.id)):
                f.write(line + b"\n")
        return head


def peak_of(cmd: list[str], env: dict[str, str]) -> tuple[int, float, str]:
    """(exit code, peak RSS in MB, last stderr line) of `cmd`, run alone in a fresh child."""
    probe = (
        "import resource, subprocess, sys; "
        "lim = lambda: resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30)); "
        "p = subprocess.run(sys.argv[1:], capture_output=True, preexec_fn=lim); "
        "r = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss; "
        "print(p.returncode, r, (p.stderr.decode().strip().splitlines() or [''])[-1][:200], "
        "sep='\\t')"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, *cmd],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
    ).stdout
    code, rss, err = out.rstrip("\n").split("\t")
    return int(code), int(rss) / 1024, err


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=150)
    ap.add_argument("--src", default=str(Path(__file__).resolve().parents[1] / "src"))
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        work = Path(tmp)
        export = work / "big.jsonl"
        events = build_export(export, a.mb, work)
        env = {**os.environ, "PYTHONPATH": a.src, "BUBU_HOME": str(work)}
        bubu = [sys.executable, "-m", "bubu", "--db", str(work / "dest.db")]
        code, imp_mb, err = peak_of([*bubu, "import", str(export)], env)
        zcode, zero_mb, zerr = peak_of(
            [*bubu, "run", "hi", "-w", str(work), "-m", "scripted:/dev/zero"], env
        )
        print(
            json.dumps(
                {
                    "src": a.src,
                    "export_mb": round(export.stat().st_size / 1e6, 1),
                    "events": events,
                    "import_exit": code,
                    "import_peak_mb": round(imp_mb, 1),
                    "import_error": err,
                    "dev_zero_exit": zcode,
                    "dev_zero_peak_mb": round(zero_mb, 1),
                    "dev_zero_error": zerr,
                    "own_peak_mb": round(
                        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1
                    ),
                }
            )
        )


if __name__ == "__main__":
    main()
