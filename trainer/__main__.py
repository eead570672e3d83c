"""``python -m trainer``: training with instant-ngp style flags, on one process, as one rank of a
job that torchrun or srun started, or as the launcher of ``--nproc-per-node N`` ranks
(:mod:`trainer.launch_cli`; ``ngptune train`` is an alias)."""

import os
import sys

from trainer.contract.signals import main_to_its_end


def _main():
    from trainer.launch_cli import main

    return main


if __name__ == "__main__":
    code = main_to_its_end(_main, "run")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from trainer.parallel.dist_env import exit_without_teardown

        # a rank that finished, or printed its error and left its group: an abort at teardown
        # would hide its exit status behind a SIGABRT/SIGSEGV (see the function's docstring)
        exit_without_teardown(code or 0)
    sys.exit(code)
