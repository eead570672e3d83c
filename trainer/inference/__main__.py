"""``python -m trainer.inference render|export ...``."""

import signal
import sys

if __name__ == "__main__":
    try:
        from trainer.inference.cli import main

        code = main()
    except KeyboardInterrupt:  # Ctrl-C before the command could take it (while its modules load)
        print("interrupted before the command started", file=sys.stderr)
        code = 130
    for signum in (signal.SIGINT, signal.SIGTERM):  # it has ended and said how: a late signal changes
        signal.signal(signum, signal.SIG_IGN)  # neither that nor the exit status
    sys.exit(code)
