"""The command line: the only code that prints for people or handles signals; one module per command group."""

from relay.cli.main import main

__all__ = ["main"]
