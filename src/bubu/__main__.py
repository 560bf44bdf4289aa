"""`python -m bubu` runs the CLI."""

from bubu.cli import main

main()
