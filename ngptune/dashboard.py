"""``ngptune dashboard STUDY_DIR``: a study in optuna-dashboard (its own web page of the trials,
plots and notes), while the sweep runs or after.

The storage is the study folder's Optuna journal (``study.journal``, the sweep's default), or the
RDB of ``--storage URL`` (the URL the sweep was given: the folder records it without its
password). The page is served on ``--host``/``--port`` (default 127.0.0.1 and a free port,
printed) until Ctrl-C, which stops it with one line.
"""

from __future__ import annotations

import argparse
import errno
import sys
import threading
from pathlib import Path
from typing import Any

from ngptune.errors import NgptuneError
from trainer.contract import fit_lines

__all__ = ["DashboardError", "dashboard_command", "open_study_storage", "register"]

INTERRUPTED_EXIT = 130


class DashboardError(NgptuneError):
    """The dashboard cannot start: no study in the folder, a port in use; names the folder or flag."""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``dashboard`` to a parent parser's sub-commands."""
    p = subparsers.add_parser("dashboard", help="open a sweep's study in optuna-dashboard (a web page)")
    p.add_argument("study_dir", type=Path, help="the sweep's --out folder (reports/<study> by default)")
    p.add_argument("--storage", default=None, metavar="URL",
                   help="the RDB URL the sweep was given (default: STUDY_DIR/study.journal)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1, this machine only)")
    p.add_argument("--port", type=int, default=0, help="port to listen on (default: a free port, printed)")
    p.set_defaults(func=dashboard_command)


def open_study_storage(study_dir: Path, url: str | None) -> Any:
    """The Optuna storage of a study folder: ``url``'s RDB, else the folder's journal file.

    Raises:
        DashboardError: the folder does not exist, or holds no ``study.journal`` and no ``--storage``
            was given (names both ways out).
        SweepError: the RDB cannot be opened (names the URL without its password).
    """
    from ngptune.tuning.layout import StudyDir
    from ngptune.tuning.storage import open_storage

    study_dir = StudyDir(Path(study_dir))
    if not study_dir.root.is_dir():
        raise DashboardError(f"{study_dir.root}: no such folder (expected a sweep's --out folder)")
    if url is None and not study_dir.journal_path.is_file():
        raise DashboardError(f"{study_dir.root}: no study.journal in this folder; give the sweep's --out folder, or "
                          "--storage URL for a study kept in a database")
    return open_storage(url, study_dir)


def _quiet_handler() -> Any:
    from wsgiref.simple_server import WSGIRequestHandler

    class QuietHandler(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 — the base class's name
            pass  # no line per request on the console

    return QuietHandler


def dashboard_command(args: argparse.Namespace) -> int:
    """Serve the study until Ctrl-C; returns the exit status (130 after Ctrl-C)."""
    from wsgiref.simple_server import make_server

    try:
        import optuna_dashboard
    except ImportError:
        raise DashboardError("dashboard: needs the optuna-dashboard package; install it with "
                          "pip install 'ngptune[dashboard]'") from None
    if not 0 <= args.port <= 65535:
        raise DashboardError(f"--port {args.port}: expected a port number in 0..65535 (0: a free port)")
    storage = open_study_storage(args.study_dir, args.storage)
    names = [s.study_name for s in storage.get_all_studies()]
    try:
        server = make_server(args.host, args.port, optuna_dashboard.wsgi(storage), handler_class=_quiet_handler())
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise DashboardError(f"--port {args.port}: already in use on {args.host}; choose another port, or leave "
                              "--port out for a free one") from None
        raise DashboardError(f"--host {args.host}: cannot listen there ({exc.strerror or exc})") from None
    host = f"[{args.host}]" if ":" in args.host else args.host
    studies = ", ".join(names) if names else "no study yet"
    print("\n".join(fit_lines([f"dashboard: http://{host}:{server.server_port} —", f"{args.study_dir}", f"({studies});",
                                "Ctrl-C stops it"])), flush=True)
    # The server answers requests in its own thread, so Ctrl-C always lands in this one: raised
    # inside a request, wsgiref's handler would catch it as the request's error and serve on.
    serving = threading.Thread(target=server.serve_forever, name="dashboard-server", daemon=True)
    serving.start()
    try:
        while serving.is_alive():
            serving.join(0.5)
    except KeyboardInterrupt:
        server.shutdown()
        print("dashboard stopped", file=sys.stderr, flush=True)
        return INTERRUPTED_EXIT
    finally:
        server.server_close()
    return 1  # the serving loop ended by itself: its traceback is above
