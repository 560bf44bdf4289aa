"""What Bubu ships for the tests of code built on it: the store contract suite
(`bubu.testing.store_contract`, which needs pytest) and the test models, `FunctionProvider` (a
Python function answers) and `SchemaCallsProvider` (each offered tool called once with arguments
from its schema)."""

from bubu.providers.function import FunctionProvider
from bubu.providers.schemacalls import SchemaCallsProvider

__all__ = ["FunctionProvider", "SchemaCallsProvider"]
