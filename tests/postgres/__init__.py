"""Tests of the PostgreSQL backend beyond the shared contract, and of `bubu copy-store`."""
