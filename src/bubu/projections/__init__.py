"""Pure projections of a log prefix: no I/O, no clock, no mutation. Same prefix in, same view
out."""
