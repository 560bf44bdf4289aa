"""The warning that a limit of cost cannot hold (the model's price is unknown) names where the
limit came from: the flag, or the key and the config file that set it."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.cli import bubu
from engine.helpers import write_script


def _warning(stderr: str) -> str:
    (line,) = [x for x in stderr.splitlines() if "cannot limit it" in x]
    return line


@pytest.mark.heavy
def test_the_warning_names_the_flag_or_the_file_that_set_the_limit(tmp_path: Path) -> None:
    db, ws = tmp_path / "bubu.db", tmp_path / "ws"
    ws.mkdir()
    script = write_script(tmp_path / "s.jsonl", [{"text": "done"}] * 2)
    model = f"scripted:{script}"
    by_flag = bubu(db, "run", "task", "-w", str(ws), "-m", model, "--max-cost", "1")
    assert by_flag.returncode == 0, by_flag.stderr
    assert _warning(by_flag.stderr) == (
        f"bubu: warning: the price of {model} is unknown, so --max-cost cannot limit it "
        f'(its calls count as nothing); set [prices."{model}"] input = …, output = … (USD per '
        "million tokens) in your config file to price it"
    )
    config = (
        tmp_path / "config.toml"
    )  # $BUBU_HOME/config.toml: bubu() sets BUBU_HOME to db's folder
    config.write_text("max_cost = 1.0\n")
    by_file = bubu(db, "run", "task", "-w", str(ws), "-m", model)
    assert by_file.returncode == 0, by_file.stderr
    warning = _warning(by_file.stderr)
    assert f"so max_cost in {config} cannot limit it" in warning
    assert "--max-cost" not in warning
