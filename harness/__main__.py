"""`python -m attnbench` is the `attnbench` command."""

import sys

from attnbench.cli import main

sys.exit(main())
