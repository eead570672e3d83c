"""`make demo` from fresh clones on a loaded CPU: wall time, load and verdict of each run (prints a table).

Each run clones the repository into a new folder, starts ``--busy`` CPU-bound processes (another
user's jobs) 5 s before it, times ``make demo`` there (install, 6 trials and the confirmation
re-runs), stops the busy processes and reads the study's ``best_config.confirmation.json``. The
runs follow one another with a 20 s pause; each run's output is kept in ``RUN/demo.log``.

    python3 bench/demo_under_load.py --runs 3 --busy 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from _common import REPO, print_table

BUSY_LOOP = "while True: pass"


def one_run(repo: Path, folder: Path, busy: int) -> list[object]:
    """Clone ``repo`` into ``folder``, run ``make demo`` there beside ``busy`` busy loops; one table row."""
    if folder.exists():
        shutil.rmtree(folder)
    subprocess.run(["git", "clone", "-q", str(repo), str(folder)], check=True)
    loops = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(busy)]
    try:
        time.sleep(5)
        load_start = os.getloadavg()[0]
        started = time.perf_counter()
        with open(folder / "demo.log", "wb") as log:
            rc = subprocess.run(["make", "demo"], cwd=folder, stdout=log, stderr=subprocess.STDOUT).returncode
        wall_s = time.perf_counter() - started
        load_end = os.getloadavg()[0]
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    confirmation = folder / "reports" / "demo" / "best_config.confirmation.json"
    if rc != 0 or not confirmation.exists():
        return [folder.name, f"{wall_s:.1f}", f"{load_start:.1f}", f"{load_end:.1f}", f"failed (exit {rc})", "-", "-", "-"]
    record = json.loads(confirmation.read_text())
    verdict = record.get("verdict") or {}
    p_value = verdict.get("p_value")
    return [folder.name, f"{wall_s:.1f}", f"{load_start:.1f}", f"{load_end:.1f}", verdict.get("status", "-"),
            record.get("recommended_trial", "-"), "-" if p_value is None else f"{p_value:.2f}", len(record.get("runs", []))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=REPO, help="the repository to clone (default: this one)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--busy", type=int, default=2, help="CPU-bound processes running beside each run")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/demo_under_load"))
    args = parser.parse_args()
    if args.runs < 1 or args.busy < 0:
        parser.error("--runs must be >= 1 and --busy >= 0")
    commit = subprocess.run(["git", "-C", str(args.repo), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    rows = []
    for n in range(1, args.runs + 1):
        if n > 1:
            time.sleep(20)
        rows.append(one_run(args.repo, args.workdir / f"run{n}", args.busy))
        print(" ".join(str(v) for v in rows[-1]), flush=True)
    print_table(f"make demo from fresh clones of {commit}, {args.busy} busy loops beside each, {os.cpu_count()} cores",
                ["run", "wall s", "load at start", "load at end", "verdict", "recommended trial", "Welch p",
                 "confirmation runs"], rows)


if __name__ == "__main__":
    main()
