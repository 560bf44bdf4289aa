"""Tests of the durable log: codec, store contract, crash safety, bad input and the CLI."""
