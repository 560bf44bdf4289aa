"""The fleet fixtures (a fresh PostgreSQL schema per test) for the sub-agent fleet test."""

from fleet.conftest import pg, schema, url

__all__ = ["pg", "schema", "url"]
