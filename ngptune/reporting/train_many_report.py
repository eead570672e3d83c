"""The outputs of ``ngptune train-many``: ``summary.csv``, ``summary.html`` (a thumbnail per
scene: its first test view as rendered by the trainer's evaluation) and a terminal table."""

from __future__ import annotations

import base64
import dataclasses
import html
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from rich import box
from rich.console import Console
from rich.table import Table

from ngptune.console import print_trimmed, table_width
from ngptune.reporting.html import Section, render_page, table_html, text_html
from ngptune.reporting.study_data import write_text
from trainer.contract import RunDir, counted, fit_lines, quantity_text

__all__ = ["SUMMARY_COLUMNS", "print_summary_table", "summary_frame", "write_summary_csv", "write_summary_html"]

#: ``summary.csv`` columns (units in the names; ``status``: completed | failed; ``model``: the trained
#: snapshot or checkpoint folder; ``finished_at``: when the job completed; ``skipped_at``: when a
#: later run found it finished and skipped it, empty when this run trained it).
SUMMARY_COLUMNS = ("scene", "gpus", "steps", "train_time_s", "psnr_db", "status", "log_path", "run_dir",
                   "warm_started_from", "reason", "model", "finished_at", "skipped_at")


def summary_frame(results: Sequence) -> pd.DataFrame:
    """One row per job (:class:`ngptune.train_many.JobResult`), columns :data:`SUMMARY_COLUMNS`."""
    rows = [dataclasses.asdict(r) for r in results]
    df = pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))
    df["steps"] = pd.Series([r["steps"] for r in rows], dtype="Int64")
    return df


def write_summary_csv(results: Sequence, path: Path) -> Path:
    """Write :func:`summary_frame` as CSV (atomically); returns ``path``."""
    return write_text(Path(path), summary_frame(results).to_csv(index=False), "the train-many summary")


def _thumbnail(run_dir: str) -> str:
    render = RunDir(Path(run_dir)).render_path("test", 0)
    if not render.is_file():
        return ""
    data = base64.b64encode(render.read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(render.name)}" width="96" src="data:image/png;base64,{data}">'


def write_summary_html(results: Sequence, path: Path, *, title: str) -> Path:
    """Write ``summary.html`` (self-contained): the summary table with a thumbnail per scene."""
    df = summary_frame(results)
    counts = ", ".join(f"{s}: {n}" for s, n in df["status"].value_counts().items())
    cards = "".join(
        f'<figure style="display:inline-block;margin:0.5rem;text-align:center">{_thumbnail(r.run_dir) or "(no render)"}'
        f"<figcaption>{html.escape(Path(r.scene).name)}<br>{html.escape(r.status)}"
        + (f"<br>{r.psnr_db:.2f} dB" if isinstance(r.psnr_db, (int, float)) else "") + "</figcaption></figure>"
        for r in results
    )
    sections = [Section("Scenes", text_html(f"{len(df)} scenes ({counts}).") + cards),
                Section("Jobs", table_html(df))]
    return write_text(Path(path), render_page(title, sections), "the train-many summary page")


def _cell(name: str, value) -> str:
    return quantity_text(name, value) if value != "" else ""


def print_summary_table(results: Sequence, console: Console, job_file: str) -> None:
    """A table of the jobs that fits 80 columns (a scene name over 20 characters wraps in its
    cell): scene, GPUs, steps, training seconds, PSNR, status (``completed*`` for a job an earlier
    run finished, with a note under the table naming the first such job's ``job_file`` to remove),
    warm start; then, under 80 columns too, why each failed job failed."""
    table = Table(title=f"train-many: {counted(len(results), 'scene')}", box=box.SIMPLE_HEAD, show_edge=False,
                  pad_edge=False)
    for col in ("scene", "gpus", "steps", "training", "PSNR", "status", "warm"):
        table.add_column(col, justify="left" if col in ("scene", "status", "warm") else "right",
                         overflow="fold" if col == "scene" else "ellipsis", max_width=20 if col == "scene" else None)
    for r in results:
        colour = {"completed": "green", "failed": "red"}.get(r.status, "white")
        status = f"[{colour}]{r.status}[/{colour}]" + ("*" if r.skipped_at else "")
        table.add_row(Path(r.scene).name, r.gpus, _cell("steps", r.steps), _cell("train_time_s", r.train_time_s),
                      _cell("psnr_db", r.psnr_db), status, "yes" if r.warm_started_from else "")
    print_trimmed(console, table, table_width(console))  # rows without trailing spaces
    skipped = [r for r in results if r.skipped_at]
    if skipped:
        example = Path(skipped[0].run_dir) / job_file
        console.print("\n".join(fit_lines(["* finished by an earlier run, skipped now", f"(remove its {job_file},",
                                            f"e.g. {example},", "to train it again)"])), markup=False, highlight=False)
    for r in results:
        if r.status == "failed":
            console.print("\n".join(fit_lines([f"{r.scene}:", r.reason, f"(log: {r.log_path})"])), markup=False,
                          highlight=False, soft_wrap=True)
