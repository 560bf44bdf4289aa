"""The agent loop: a pure decide step over the log, and a driver that does the I/O."""
