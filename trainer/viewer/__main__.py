"""``python -m trainer.viewer MODEL ...``."""

import sys

from trainer.viewer.cli import main

sys.exit(main())
