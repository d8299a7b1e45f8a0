"""`python -m postmortem ...` runs the command line."""
from postmortem.cli import main

raise SystemExit(main())
