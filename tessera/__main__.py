"""``python -m tessera``: the command line."""

import sys

from tessera.cli import main

sys.exit(main())
