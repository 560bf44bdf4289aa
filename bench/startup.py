"""CPU (user + sys) of the read-only commands on a demo database, against `python -c pass`.

Makes a demo database (`bubu demo --no-crash` under a temporary BUBU_HOME) unless `--db` names
one, then runs each command in a fresh process, round-robin over the commands so that a busy
machine slows all of them alike, and reports the median of the rounds. `--src DIR` (repeatable)
measures other trees' Bubu (e.g. an older release's `src`) in the same rounds, for a baseline.
Bytecode caching is on, as in an installed Bubu, even where PYTHONDONTWRITEBYTECODE is set.

Usage: python bench/startup.py [--runs 5] [--db PATH] [--src DIR ...].
Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
OWN_SRC = HERE.parent / "src"


def installed_env(cache: Path) -> dict[str, str]:
    """The environment with bytecode caching on, as in an installed Bubu (pip compiles on
    install): the caches go to `cache`, written by the first round, which is not counted."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPYCACHEPREFIX": str(cache)}


def cpu_of(argv: list[str], env: dict[str, str]) -> float:
    """Seconds of user + sys CPU that one run of `argv` cost its process."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{argv} exited with {proc.returncode}")
    return usage.ru_utime + usage.ru_stime


def demo_db(home: Path, src: Path) -> tuple[str, str]:
    """A demo database in `home` and the id of its session."""
    env = {**os.environ, "BUBU_HOME": str(home), "PYTHONPATH": str(src)}
    subprocess.run(
        [sys.executable, "-m", "bubu", "demo", "--no-crash"],
        env=env,
        cwd=home,
        check=True,
        capture_output=True,
    )
    db = str(home / "bubu.db")
    out = subprocess.run(
        [sys.executable, "-m", "bubu", "--db", db, "sessions"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    found = re.search(r"ses_\w+", out)
    if found is None:
        raise SystemExit(f"no session in the demo database: {out!r}")
    return db, found.group(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--db", default=None, help="A database to read (default: a fresh demo).")
    parser.add_argument("--src", action="append", default=[], help="Another tree's src to time.")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        if args.db is None:
            db, session = demo_db(Path(tmp), OWN_SRC)
        else:
            db = args.db
            session = re.findall(
                r"ses_\w+",
                subprocess.check_output(
                    [sys.executable, "-m", "bubu", "--db", db, "sessions"],
                    env={**os.environ, "PYTHONPATH": str(OWN_SRC)},
                    text=True,
                ),
            )[0]
        commands = {
            "--help": ["--help"],
            "sessions": ["sessions"],
            "status": ["status", session],
            "show": ["show", session],
            "log": ["log", session],
            "verify": ["verify", session],
            "context": ["context", session],
        }
        cache = Path(tmp) / "pycache"
        trees = {"this": OWN_SRC, **{f"src{i}": Path(s) for i, s in enumerate(args.src)}}
        cases: dict[str, tuple[list[str], dict[str, str]]] = {
            "python -c pass": ([sys.executable, "-c", "pass"], installed_env(cache))
        }
        for tree, src in trees.items():
            env = {**installed_env(cache), "PYTHONPATH": str(src), "BUBU_HOME": tmp}
            for name, rest in commands.items():
                cases[f"{tree}: {name}"] = ([sys.executable, "-m", "bubu", "--db", db, *rest], env)
        times: dict[str, list[float]] = {k: [] for k in cases}
        for n in range(args.runs + 1):
            for key, (argv, env) in cases.items():
                cpu = cpu_of(argv, env)
                if n:  # the first round writes the bytecode caches
                    times[key].append(cpu)
    medians = {k: round(statistics.median(v) * 1000, 1) for k, v in times.items()}
    # The least disturbed round: on a loaded machine the median moves with the load, the
    # minimum much less.
    least = {k: round(min(v) * 1000, 1) for k, v in times.items()}
    width = max(map(len, medians))
    for key, ms in medians.items():
        print(f"{key:<{width}}  {ms:7.1f} ms CPU (median), {least[key]:7.1f} ms (min)")
    print(
        json.dumps(
            {
                "runs": args.runs,
                "median_cpu_ms": medians,
                "min_cpu_ms": least,
                "trees": {k: str(v) for k, v in trees.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
