"""What Bubu ships for the tests of code built on it: the store contract suite
(`bubu.testing.store_contract`, which needs pytest) and the test models, `FunctionProvider` (a
Python function answers) and `SchemaCallsProvider` (each offered tool called once with arguments
from its schema)."""

import sys

from bubu.providers.function import FunctionProvider
from bubu.providers.schemacalls import SchemaCallsProvider

if "pytest" in sys.modules:  # under pytest: a failed contract assertion shows its values
    sys.modules["pytest"].register_assert_rewrite("bubu.testing.store_contract")

__all__ = ["FunctionProvider", "SchemaCallsProvider"]
