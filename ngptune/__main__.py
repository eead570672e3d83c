"""``python -m ngptune``: the same as the ``ngptune`` console script."""

import sys

from ngptune.cli import main

sys.exit(main())
