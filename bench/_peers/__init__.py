"""Helpers of `bench/peers.py`: one module per system measured, the shared harness, the report."""
