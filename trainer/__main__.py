"""``python -m trainer``: single-process training with instant-ngp style flags (and one rank of a
distributed job under ``ngptune train --nproc-per-node``, ``torchrun`` or ``srun``)."""

import os
import sys

from trainer.cli import main

if __name__ == "__main__":
    code = main()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from trainer.parallel.dist_env import exit_without_teardown

        # a rank that finished, or printed its error and left its group: an abort at teardown
        # would hide its exit status behind a SIGABRT/SIGSEGV (see the function's docstring)
        exit_without_teardown(code or 0)
    sys.exit(code)
