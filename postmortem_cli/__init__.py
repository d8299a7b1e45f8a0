"""The `postmortem` command line and `postmortem scan`: the layer that uses both the analyzer
(`postmortem`) and the renderer (`reports`), so that neither of them depends on the other's
caller (docs/architecture.md)."""

from postmortem_cli.cli import main

__all__ = ["main"]
