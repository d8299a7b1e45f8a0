"""`python -m postmortem ...` runs the command line, which lives above the library in
postmortem_cli (docs/architecture.md: the one module of postmortem/ that imports it; the library
never imports this file)."""
from postmortem_cli.cli import main

raise SystemExit(main())
