"""``python -m trainer``: training with instant-ngp style flags, on one process, as one rank of a
job that torchrun or srun started, or as the launcher of ``--nproc-per-node N`` ranks
(:mod:`trainer.launch_cli`; ``ngptune train`` is an alias)."""

import os
import signal
import sys

if __name__ == "__main__":
    try:
        from trainer.launch_cli import main

        code = main()
    except KeyboardInterrupt:  # Ctrl-C before the run could take it (while its modules load)
        print("interrupted before the run started", file=sys.stderr)
        code = 130
    for signum in (signal.SIGINT, signal.SIGTERM):  # the run has ended and said how: a late signal (a copy
        signal.signal(signum, signal.SIG_IGN)  # passed on by ngptune) changes neither that nor the exit status
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from trainer.parallel.dist_env import exit_without_teardown

        # a rank that finished, or printed its error and left its group: an abort at teardown
        # would hide its exit status behind a SIGABRT/SIGSEGV (see the function's docstring)
        exit_without_teardown(code or 0)
    sys.exit(code)
