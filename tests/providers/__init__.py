"""Tests of the model provider adapters on hand-written wire fixtures (no network)."""
