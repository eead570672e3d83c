"""Scheduling overhead: seconds from one job's process ending (its slot about to be freed) to the
next job's process starting, through the same path as sweep trials and train-many jobs
(:class:`ngptune.scheduling.slots.SlotPool` claims + :func:`ngptune.tuning.trial.run_trial`).

Each job is ``python -c`` printing its start and end time; one slot (or K on K fake GPUs), N jobs
from as many threads. The gap includes the poll interval of the run loop (``--poll-s``; the sweep's
default is 0.5 s, train-many's the same) and the interpreter start of the next job.

    python bench/scheduling.py --jobs 8 --poll-s 0.5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
from pathlib import Path

import _common  # noqa: F401  (puts the repository on sys.path)
from _common import machine_description, print_table

from ngptune.scheduling.slots import SlotPool
from ngptune.tuning.trial import TrialLaunch, run_trial

JOB = "import time, sys; print('start', time.time(), flush=True); time.sleep(float(sys.argv[1])); print('end', time.time())"


def measure(n_jobs: int, n_slots: int, poll_s: float, job_s: float) -> list[float]:
    """Gaps (s) between a job's end and the next start on the same GPU."""
    tmp = Path(tempfile.mkdtemp(prefix="ngptune-sched-"))
    pool = SlotPool(list(range(n_slots)), 1, claims_dir=tmp / "claims")
    spans: list[tuple[int, float, float]] = []
    lock = threading.Lock()

    def job(i: int) -> None:
        slot = pool.claim()
        log = tmp / f"{i}.log"
        try:
            run = run_trial(TrialLaunch(argv=[sys.executable, "-c", JOB, str(job_s)], env=slot.env(os.environ),
                                        run_dir=tmp / f"run{i}", log_path=log, world_size=1, timeout_s=60, poll_s=poll_s))
        finally:
            pool.release(slot, run.leftover_pids if "run" in locals() else [])
        words = dict(line.split() for line in log.read_text().splitlines() if line.split()[0] in ("start", "end"))
        with lock:
            spans.append((slot.gpus[0], float(words["start"]), float(words["end"])))

    threads = [threading.Thread(target=job, args=(i,)) for i in range(n_jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gaps = []
    for gpu in range(n_slots):
        mine = sorted((s, e) for g, s, e in spans if g == gpu)
        gaps += [b[0] - a[1] for a, b in zip(mine, mine[1:])]
    return gaps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--poll-s", type=float, nargs="+", default=[0.5, 0.1])
    parser.add_argument("--slots", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--job-s", type=float, default=0.2, help="seconds each job sleeps")
    args = parser.parse_args()
    rows = []
    for poll_s in args.poll_s:
        for n_slots in args.slots:
            gaps = measure(args.jobs, n_slots, poll_s, args.job_s)
            rows.append([poll_s, n_slots, len(gaps), statistics.median(gaps), max(gaps)])
    print_table(f"Scheduling overhead: job end -> next job start on the same slot ({machine_description()})",
                ["poll_s", "slots", "gaps", "median_s", "max_s"], rows)


if __name__ == "__main__":
    main()
