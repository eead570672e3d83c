"""``python -m trainer``: single-process training with instant-ngp style flags (and one rank of a
distributed job under ``ngptune train --nproc-per-node``, ``torchrun`` or ``srun``)."""

import os
import sys

from trainer.cli import main

if __name__ == "__main__":
    code = main()
    if not code and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from trainer.parallel.dist_env import exit_without_teardown

        exit_without_teardown(0)  # a finished rank: see its docstring (an abort at teardown)
    sys.exit(code)
