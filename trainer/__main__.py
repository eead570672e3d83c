"""``python -m trainer``: single-process training with instant-ngp style flags."""

import sys

from trainer.cli import main

if __name__ == "__main__":
    sys.exit(main())
