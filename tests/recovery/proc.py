"""Running `bubu` as a real subprocess for the crash tests: the same helpers the engine tests
use."""

from engine.cli import bubu, bubu_cmd, bubu_env, bubu_json, only_session

__all__ = ["bubu", "bubu_cmd", "bubu_env", "bubu_json", "only_session"]
