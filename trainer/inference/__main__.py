"""``python -m trainer.inference render|export ...``."""

import sys

from trainer.contract.signals import main_to_its_end


def _main():
    from trainer.inference.cli import main

    return main


if __name__ == "__main__":
    sys.exit(main_to_its_end(_main, "command"))
