"""``python -m trainer.inference render|export ...``."""

import sys

from trainer.inference.cli import main

sys.exit(main())
