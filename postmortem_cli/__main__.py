"""`python -m postmortem_cli ...` runs the command line."""
from postmortem_cli.cli import main

raise SystemExit(main())
