"""What Bubu ships for the tests of code built on it: the store contract suite
(`bubu.testing.store_contract`, needs pytest) and the test models (`bubu.providers.testing`)."""
