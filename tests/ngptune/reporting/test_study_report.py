"""Study report of a sweep: trials.csv contents, report.html in a real headless browser, the rich summary.

Studies are real in-memory Optuna studies driven the way the sweep drives them: enqueue the params,
``ask`` with the search space, set the trial's user attributes, ``tell`` a value, PRUNED or FAIL.
"""

from __future__ import annotations

import csv
import html.parser
import io
import math
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState
from rich.console import Console
from rich.table import Table

from ngptune.reporting.study_report import (
    StudyReportError,
    best_trials,
    default_trial,
    objective_names,
    print_summary,
    trials_frame,
    write_study_report,
    write_trials_csv,
)
from ngptune.reporting.study_summary import summary_parts
from tests.support.browser import view_in_browser
from trainer.contract.rundir import RunDir
from trainer.contract.metrics import MetricsWriter

optuna.logging.set_verbosity(optuna.logging.ERROR)
pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")  # set_metric_names

SPACE = {
    "parallel.mode": CategoricalDistribution(["data", "subgrid"]),
    "parallel.num_subgrids": IntDistribution(2, 8),
    "training.lr": FloatDistribution(1e-3, 1e-1, log=True),
    "encoding.log2_hashmap_size": IntDistribution(11, 13),
    "training.cone_angle": CategoricalDistribution([0.0, 0.00390625, 0.015625]),
    "loss.distortion_weight": CategoricalDistribution([0.0, 0.01, 0.05]),
}


def _run_trial(
    study: optuna.Study,
    tmp_path: Path,
    params: dict[str, Any],
    *,
    state: TrialState = TrialState.COMPLETE,
    values: list[float] | None = None,
    reason: str = "",
    duration_s: float = 10.0,
    phase_ms: dict[str, float] | None = None,
    diagnoses: list[dict[str, Any]] | None = None,
    nccl_env: dict[str, str] | None = None,
    nccl_applied: dict[str, str] | None = None,
    interconnect: str = "none",
    metrics: list[tuple[float, float | None]] | None = None,
    record_objectives: bool = True,
    quality: dict[str, float] | None = None,
    worker: str | None = None,
    derived: dict[str, float] | None = None,
    is_default: bool | None = None,
) -> int:
    """One trial as the sweep records it; ``metrics`` = (throughput, eval PSNR or None) records for its run;
    ``derived`` = what its run chose for the config's null settings (status.json's derived_settings)."""
    study.enqueue_trial(params)
    space = {k: v for k, v in SPACE.items() if k in params}
    trial = study.ask(space)
    number = trial.number
    run_dir = tmp_path / "trials" / f"{number:04d}"
    outcome = {TrialState.COMPLETE: "completed", TrialState.PRUNED: "pruned", TrialState.FAIL: "failed"}[state]
    attrs: dict[str, Any] = {
        "outcome": outcome,
        "reason": reason,
        "log_path": str(RunDir(run_dir).log_path(0)),
        "run_dir": str(run_dir),
        "config_path": str(RunDir(run_dir).config_path),
        "duration_s": duration_s,
        "is_default": number == 0 if is_default is None else is_default,
        "settings": {"training.n_steps": 200, **params},
        "nccl_env": nccl_env or {},
        "nccl_applied": nccl_applied or {},
        "nccl_active": bool(nccl_env),
        "emulated_interconnect": interconnect,
        "phase_ms": phase_ms or {},
        "diagnoses": diagnoses or [],
        "quality": quality or {},
        "derived_settings": derived or {},
    }
    if worker is not None:
        attrs["worker"] = worker
    if record_objectives and values is not None:
        attrs["objectives"] = dict(zip(study.metric_names or [], values))
    for key, value in attrs.items():
        trial.set_user_attr(key, value)
    if metrics:
        with MetricsWriter(RunDir(run_dir).metrics_path(0)) as writer:
            for step, (throughput, psnr) in enumerate(metrics, start=1):
                record = {"rank": 0, "world_size": 2, "step": step * 10, "wall_time_s": step * 1.0, "loss": 0.1,
                          "throughput_samples_per_s": throughput, "step_time_ms": 50.0}
                if psnr is not None:
                    record["eval_psnr_db"] = psnr
                writer.write(record)
    if state == TrialState.COMPLETE:
        study.tell(trial, values)
    else:
        study.tell(trial, state=state)
    return number


PHASES_DEFAULT = {"data": 4.0, "march": 10.0, "field_forward": 12.0, "backward": 20.0, "comm": 30.0, "other": 4.0}
PHASES_BEST = {"data": 4.0, "march": 10.0, "field_forward": 12.0, "backward": 20.0, "comm": 8.0, "other": 2.0}
COMM_DIAGNOSIS = {"bottleneck": "communication", "severity": "high",
                  "evidence": "exposed all-reduce is 37% of the step", "knob": "parallel.overlap=true"}
DATA_DIAGNOSIS = {"bottleneck": "data_loading", "severity": "low",
                  "evidence": "data phase is 7% of the step", "knob": "data.placement=device"}
OOM_REASON = "out of memory: CUDA out of memory. (simulated by faults.oom_at_step)"
CRASH_REASON = "crash: rank 1 exited with code 1 (simulated crash (faults.crash_at_step))"


@pytest.fixture()
def single_study(tmp_path: Path) -> optuna.Study:
    """One objective (throughput, max): default, 2 better completed trials, one pruned, one failed."""
    study = optuna.create_study(study_name="single", direction="maximize")
    study.set_metric_names(["throughput_samples_per_s"])
    _run_trial(study, tmp_path, {"parallel.mode": "data", "training.lr": 0.01}, values=[1000.0],
               phase_ms=PHASES_DEFAULT, diagnoses=[DATA_DIAGNOSIS, COMM_DIAGNOSIS], metrics=[(900.0, None), (1000.0, 21.5)])
    _run_trial(study, tmp_path, {"parallel.mode": "subgrid", "parallel.num_subgrids": 4, "training.lr": 0.02},
               values=[1500.0], duration_s=12.5, phase_ms=PHASES_BEST, metrics=[(1400.0, None), (1600.0, 22.25)])
    _run_trial(study, tmp_path, {"parallel.mode": "data", "training.lr": 0.05}, values=[1200.0], duration_s=11.0)
    _run_trial(study, tmp_path, {"parallel.mode": "subgrid", "parallel.num_subgrids": 8, "training.lr": 0.002},
               state=TrialState.PRUNED, reason=OOM_REASON, duration_s=3.0)
    _run_trial(study, tmp_path, {"parallel.mode": "data", "training.lr": 0.09},
               state=TrialState.FAIL, reason=CRASH_REASON, duration_s=4.0)
    return study


@pytest.fixture()
def pareto_study(tmp_path: Path) -> optuna.Study:
    """Two objectives (PSNR at budget, throughput; both max), NCCL active, emulated PCIe."""
    study = optuna.create_study(study_name="pareto", directions=["maximize", "maximize"])
    study.set_metric_names(["psnr_at_budget_db", "throughput_samples_per_s"])
    env = {"NCCL_ALGO": "Ring", "NCCL_P2P_DISABLE": "1"}
    common = {"interconnect": "pcie", "nccl_env": env}
    _run_trial(study, tmp_path, {"parallel.mode": "data", "training.lr": 0.01}, values=[20.0, 1000.0],
               phase_ms=PHASES_DEFAULT, nccl_applied={"NCCL_ALGO": "Ring", "NCCL_P2P_DISABLE": "1"}, **common)
    _run_trial(study, tmp_path, {"parallel.mode": "data", "training.lr": 0.03}, values=[24.0, 900.0],
               phase_ms=PHASES_DEFAULT, nccl_applied={"NCCL_ALGO": "Ring", "NCCL_P2P_DISABLE": "1"}, **common)
    _run_trial(study, tmp_path, {"parallel.mode": "subgrid", "parallel.num_subgrids": 2, "training.lr": 0.02},
               values=[22.0, 1400.0], phase_ms=PHASES_BEST, nccl_applied={"NCCL_ALGO": "Tree"},
               interconnect="pcie", nccl_env={"NCCL_ALGO": "Tree", "NCCL_P2P_DISABLE": "1"})
    _run_trial(study, tmp_path, {"parallel.mode": "subgrid", "parallel.num_subgrids": 4, "training.lr": 0.004},
               values=[19.0, 800.0], **common)
    _run_trial(study, tmp_path, {"parallel.mode": "data", "training.lr": 0.08},
               state=TrialState.FAIL, reason="NCCL error: unhandled system error", **common)
    return study


@pytest.fixture()
def failed_study(tmp_path: Path) -> optuna.Study:
    """Degenerate: every trial failed, the default included."""
    study = optuna.create_study(study_name="broken", direction="maximize")
    study.set_metric_names(["throughput_samples_per_s"])
    _run_trial(study, tmp_path, {"parallel.mode": "data", "training.lr": 0.01}, state=TrialState.FAIL,
               reason="hang: no metrics for 120 s (timeout)", duration_s=120.0)
    _run_trial(study, tmp_path, {"parallel.mode": "subgrid", "parallel.num_subgrids": 2, "training.lr": 0.02},
               state=TrialState.FAIL, reason=CRASH_REASON, duration_s=5.0)
    return study


# ----------------------------------------------------------------------------------------------
# trials.csv
# ----------------------------------------------------------------------------------------------


def _log(tmp_path: Path, number: int) -> str:
    return str(RunDir(tmp_path / "trials" / f"{number:04d}").log_path(0))


def test_trials_csv_single_objective(single_study: optuna.Study, tmp_path: Path) -> None:
    path = write_trials_csv(single_study, tmp_path / "out" / "trials.csv")
    log = [_log(tmp_path, n) for n in range(5)]
    assert path.read_text().splitlines() == [
        "number,state,outcome,reason,duration_s,throughput_samples_per_s,"
        "psnr_db,train_time_s,steps,steps_per_s,rays_per_s,samples_per_s,samples_per_ray,occupancy_fraction,startup_s,"
        "param_parallel.mode,param_training.lr,param_parallel.num_subgrids,gpus,log_path",
        f"0,COMPLETE,completed,,10.0,1000.0,,,,,,,,,,data,0.01,,,{log[0]}",
        f"1,COMPLETE,completed,,12.5,1500.0,,,,,,,,,,subgrid,0.02,4,,{log[1]}",  # conditional int stays an int
        f"2,COMPLETE,completed,,11.0,1200.0,,,,,,,,,,data,0.05,,,{log[2]}",
        f"3,PRUNED,pruned,{OOM_REASON},3.0,,,,,,,,,,,subgrid,0.002,8,,{log[3]}",
        f"4,FAIL,failed,{CRASH_REASON},4.0,,,,,,,,,,,data,0.09,,,{log[4]}",
    ]


def test_trials_csv_writes_steps_as_a_count(tmp_path: Path) -> None:
    study = optuna.create_study(study_name="steps", direction="maximize")
    _run_trial(study, tmp_path, {"training.lr": 0.01}, values=[20.0], quality={"psnr_db": 20.0, "steps": 6650.0})
    _run_trial(study, tmp_path, {"training.lr": 0.02}, state=TrialState.FAIL, reason="crash")
    rows = list(csv.DictReader(write_trials_csv(study, tmp_path / "trials.csv").open()))
    assert [row["steps"] for row in rows] == ["6650", ""]


def test_trials_csv_two_objectives(pareto_study: optuna.Study, tmp_path: Path) -> None:
    path = write_trials_csv(pareto_study, tmp_path / "trials.csv")
    log = [_log(tmp_path, n) for n in range(5)]
    assert path.read_text().splitlines() == [
        "number,state,outcome,reason,duration_s,psnr_at_budget_db,throughput_samples_per_s,"
        "psnr_db,train_time_s,steps,steps_per_s,rays_per_s,samples_per_s,samples_per_ray,occupancy_fraction,startup_s,"
        "param_parallel.mode,param_training.lr,param_parallel.num_subgrids,gpus,log_path",
        f"0,COMPLETE,completed,,10.0,20.0,1000.0,,,,,,,,,,data,0.01,,,{log[0]}",
        f"1,COMPLETE,completed,,10.0,24.0,900.0,,,,,,,,,,data,0.03,,,{log[1]}",
        f"2,COMPLETE,completed,,10.0,22.0,1400.0,,,,,,,,,,subgrid,0.02,2,,{log[2]}",
        f"3,COMPLETE,completed,,10.0,19.0,800.0,,,,,,,,,,subgrid,0.004,4,,{log[3]}",
        f"4,FAIL,failed,NCCL error: unhandled system error,10.0,,,,,,,,,,,,data,0.08,,,{log[4]}",
    ]


def test_trials_csv_all_failed(failed_study: optuna.Study, tmp_path: Path) -> None:
    df = pd.read_csv(write_trials_csv(failed_study, tmp_path / "trials.csv"), keep_default_na=False)
    assert df["state"].tolist() == ["FAIL", "FAIL"]
    assert df["reason"].tolist() == ["hang: no metrics for 120 s (timeout)", CRASH_REASON]
    assert df["throughput_samples_per_s"].tolist() == ["", ""]


def test_trials_csv_running_and_unrecorded_trials(tmp_path: Path) -> None:
    """A trial another worker still runs, and one Optuna failed without the sweep's attributes
    (a killed worker's stale trial): the outcome is the state's meaning, the reason stays empty."""
    study = optuna.create_study(study_name="workers", direction="maximize")
    stale = study.ask({"training.lr": SPACE["training.lr"]})
    study.tell(stale, state=TrialState.FAIL)
    running = study.ask({"training.lr": SPACE["training.lr"]})
    running.set_user_attr("outcome", "failed")  # preset by the sweep that runs it, for a kill under it
    df = trials_frame(study)
    assert df["state"].tolist() == ["FAIL", "RUNNING"]
    assert df["outcome"].tolist() == ["failed", "running"]
    assert df["reason"].tolist() == ["", ""]
    assert df["log_path"].tolist() == ["", ""]
    assert not math.isnan(df["duration_s"][0]) and math.isnan(df["duration_s"][1])  # Optuna's start→complete
    assert df["objective_0"].isna().all()


def test_objective_names_from_attributes_must_follow_study_order(tmp_path: Path) -> None:
    study = optuna.create_study(study_name="unnamed", directions=["maximize", "minimize"])
    trial = study.ask()
    trial.set_user_attr("objectives", {"time_to_psnr_s": 30.0, "throughput_samples_per_s": 900.0})
    study.tell(trial, [900.0, 30.0])
    with pytest.raises(StudyReportError, match=r"trial 0: user attribute 'objectives'.*study's order"):
        objective_names(study)
    ordered = optuna.create_study(directions=["maximize", "minimize"])
    trial = ordered.ask()
    trial.set_user_attr("objectives", {"throughput_samples_per_s": 900.0, "time_to_psnr_s": 30.0})
    ordered.tell(trial, [900.0, 30.0])
    assert objective_names(ordered) == ["throughput_samples_per_s", "time_to_psnr_s"]
    bare = optuna.create_study(directions=["maximize", "minimize"])
    assert objective_names(bare) == ["objective_0", "objective_1"]


def test_bad_attribute_is_one_clear_error() -> None:
    study = optuna.create_study(study_name="bad")
    trial = study.ask()
    trial.set_user_attr("phase_ms", [1.0, 2.0])
    study.tell(trial, 1.0)
    with pytest.raises(StudyReportError, match=r"study 'bad', trial 0: user attribute 'phase_ms' must be a dict"):
        trials_frame(study)


def test_best_and_default(single_study: optuna.Study, pareto_study: optuna.Study, failed_study: optuna.Study) -> None:
    assert [t.number for t in best_trials(single_study)] == [1]
    assert [t.number for t in best_trials(pareto_study)] == [1, 2]  # 0 and 3 are dominated
    assert best_trials(failed_study) == []
    assert default_trial(single_study).number == 0


# ----------------------------------------------------------------------------------------------
# report.html in a real browser
# ----------------------------------------------------------------------------------------------


def _check_page(path: Path):
    view = view_in_browser(path)
    assert view.errors == []
    assert view.failed_requests == []
    assert view.plots_total > 0 and view.plots_rendered == view.plots_total
    return view


def test_report_single_objective(single_study: optuna.Study, tmp_path: Path) -> None:
    path = write_study_report(single_study, tmp_path / "report", title="Sweep single", nccl_active=False)
    assert path == tmp_path / "report" / "report.html"
    view = _check_page(path)
    # history, importances, parallel coordinates, objectives, run metrics, step-time breakdown
    assert view.plots_total == 6
    text = view.text
    for heading in ("Optimisation history", "Parameter importances", "Parallel coordinates",
                    "Objectives, run metrics and settings: best vs default (single runs)", "Trials",
                    "Bottlenecks per trial", "NCCL"):
        assert heading in text
    assert text.startswith("Sweep single\n\nWritten ") and ("Recommendation\n\nBest trial #1 is recommended "
                                                           "unconfirmed: no re-runs of it and the default are recorded") in text
    assert "No confirmation re-runs are recorded" in text
    assert "Pareto front" not in text
    assert "Plot absent" not in text
    assert (f"Watch it: ngptune dashboard {tmp_path / 'report'} opens this study in optuna-dashboard; "
            f"tensorboard --logdir {tmp_path / 'report' / 'trials'} shows every trial's training curves.") in text
    assert "Best = trial #1 (study.best_trial)." in text
    assert "Step-time breakdown (mean ms per step, from phase_ms)" in text
    assert "Run metrics, single runs (rank 0 metrics.jsonl" in text
    assert "Run metrics absent: trial #1" not in text
    # run metrics: median throughput (950, 1500), last PSNR (21.5, 22.25)
    assert "run throughput_samples_per_s\t950 samples/s\t1.50 k samples/s\t+57.9 %" in text
    assert "run eval_psnr_db\t21.50 dB\t22.25 dB\t+0.75 dB" in text  # a PSNR gain in dB, never in percent
    assert "comm_ms\t30.0 ms\t8.0 ms\t-22.0 ms" in text
    assert "parallel.mode=subgrid\nparallel.num_subgrids=4\ntraining.lr=0.02" in text  # an int stays an int
    # settings that differ: mode, num_subgrids (absent in the default), lr; n_steps is equal
    assert "parallel.mode\tdata\tsubgrid" in text
    assert "training.lr\t0.01\t0.02" in text
    assert "training.n_steps" not in text.split("Settings that differ from the default")[1].split("Trials")[0]
    assert OOM_REASON in text and CRASH_REASON in text
    assert "communication (high)" in text  # main diagnosis: the highest severity
    assert "exposed all-reduce is 37% of the step" in text
    assert "NCCL parameters inactive (gloo backend)" in text
    assert "Emulated interconnect" not in text


def test_report_two_objectives_with_nccl(pareto_study: optuna.Study, tmp_path: Path) -> None:
    path = write_study_report(pareto_study, tmp_path, title="Sweep pareto", nccl_active=True)
    view = _check_page(path)
    # history ×2, importances ×2, Pareto front, parallel coordinates ×2, objectives, step-time breakdown
    assert view.plots_total == 9
    text = view.text
    assert "Trials on the Pareto front: #1, #2." in text
    assert "Best = the Pareto-front trials: #1, #2." in text
    assert "Plot absent" not in text
    assert "Emulated interconnect: pcie (NCCL_P2P_DISABLE=1)" in text
    assert "NCCL parameters inactive" not in text
    assert "2\tNCCL_ALGO\tTree\tTree\tas set" in text
    assert "2\tNCCL_P2P_DISABLE\t1\t\tnot reported" in text  # set but not reported back
    assert "env NCCL_ALGO\tRing\tRing\tTree" in text  # a differing setting of Pareto trial #2
    assert "NCCL error: unhandled system error" in text
    # no trial has a run directory with metrics: said so, not hidden
    assert "Run metrics absent: trial #0:" in text


def test_report_all_trials_failed(failed_study: optuna.Study, tmp_path: Path) -> None:
    path = write_study_report(failed_study, tmp_path, title="Sweep broken", nccl_active=False)
    view = view_in_browser(path)
    assert view.errors == [] and view.failed_requests == []
    assert view.plots_total == 0
    text = view.text
    assert "Plot absent: no trial completed, so there is no objective value to plot." in text
    assert "Plot absent: parameter importances need at least 2 completed trials; this study has 0." in text
    assert "Plot absent: no trial completed." in text
    assert "The default trial #0 did not complete (outcome failed: hang: no metrics for 120 s (timeout))" in text
    assert "No trial completed, so there is no best trial to compare." in text
    assert CRASH_REASON in text


def test_report_importances_need_two_varying_trials(tmp_path: Path) -> None:
    study = optuna.create_study(study_name="one", direction="maximize")
    study.set_metric_names(["throughput_samples_per_s"])
    _run_trial(study, tmp_path, {"parallel.mode": "data", "training.lr": 0.01}, values=[1000.0], phase_ms=PHASES_DEFAULT)
    text = view_in_browser(write_study_report(study, tmp_path, title="one", nccl_active=False)).text
    assert "Plot absent: parameter importances need at least 2 completed trials; this study has 1." in text
    assert "Best = trial #0 (study.best_trial): the default itself; no trial beat it." in text
    assert "Settings that differ" not in text  # the default is the best: nothing to compare against
    _run_trial(study, tmp_path, {"parallel.mode": "data", "training.lr": 0.01}, values=[1010.0])
    text = write_study_report(study, tmp_path, title="two", nccl_active=False).read_text()  # markup checked above
    assert "Plot absent: no parameter takes more than one value among the completed trials" in text


def test_importances_are_fanova_from_24_completed_trials_marginal_plots_below(tmp_path: Path) -> None:
    study = optuna.create_study(study_name="many", direction="maximize", sampler=optuna.samplers.RandomSampler(seed=1))
    study.set_metric_names(["psnr_at_budget_db"])
    space = {"training.lr": FloatDistribution(1e-3, 1e-1, log=True), "encoding.log2_hashmap_size": IntDistribution(11, 13)}
    for i in range(24):
        trial = study.ask(space)
        trial.set_user_attr("is_default", i == 0)
        # the PSNR follows the learning rate; the table size is noise
        study.tell(trial, 20.0 + 5.0 * math.log10(trial.params["training.lr"] / 1e-3) + 0.01 * (i % 3))
        if i == 22:
            below = write_study_report(study, tmp_path / "below", title="t", nccl_active=False).read_text()
    assert "Importances are not shown: 23 completed trials, fewer than the 24" in below
    text = view_in_browser(write_study_report(study, tmp_path / "at", title="t", nccl_active=False)).text
    assert "fANOVA (Hutter et al. 2014; Optuna's FanovaImportanceEvaluator" in text
    assert "over the 24 completed trials" in text and "Importances are not shown" not in text
    importances = optuna.importance.get_param_importances(
        study, evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0))
    assert list(importances)[0] == "training.lr" and importances["training.lr"] > 0.9


def test_pruned_trials_show_as_pruned_with_their_intermediate_values(tmp_path: Path) -> None:
    study = optuna.create_study(study_name="pruned", direction="maximize")
    study.set_metric_names(["psnr_at_budget_db"])
    for number, marks, state in ((0, [18.0, 22.0, 25.0], TrialState.COMPLETE), (1, [12.0], TrialState.PRUNED)):
        trial = study.ask({"training.lr": FloatDistribution(1e-3, 1e-1, log=True)})
        for k, value in enumerate(marks):
            trial.report(value, 20 * (k + 1))
        trial.set_user_attr("is_default", number == 0)
        reason = "" if state == TrialState.COMPLETE else "pruned by HyperbandPruner at step 20 (PSNR of the evaluation marks = 12)"
        trial.set_user_attr("outcome", "completed" if state == TrialState.COMPLETE else "pruned")
        trial.set_user_attr("reason", reason)
        study.tell(trial, marks[-1] if state == TrialState.COMPLETE else None, state=state)
    text = view_in_browser(write_study_report(study, tmp_path, title="t", nccl_active=False)).text
    part = text.split("Pruned trials and intermediate values")[1]
    assert "1 of 2 trials that reported intermediate values were pruned" in part
    assert "1\t20\t12\tpruned by HyperbandPruner at step 20" in part


# ----------------------------------------------------------------------------------------------
# Terminal summary
# ----------------------------------------------------------------------------------------------


def _summary(study: optuna.Study) -> list[str]:
    """The summary's sentence lines and, for each table, its title, its header and each row, their
    cells joined by single spaces (the printed table may wrap a cell over several lines). Printed
    at 80 columns and piped (200 columns), every line fits 80 columns."""
    for width in (80, 200):  # a terminal, and piped output (ngptune.console.PIPED_WIDTH)
        console = Console(file=io.StringIO(), width=width, color_system=None)
        print_summary(study, console)
        printed = console.file.getvalue().splitlines()
        assert printed and max(len(line) for line in printed) <= 80, [line for line in printed if len(line) > 80]
        assert not any("…" in line for line in printed), printed  # a cell wraps, never cut short
    lines: list[str] = []
    for part in summary_parts(study):
        if isinstance(part, Table):
            lines.append(str(part.title))
            lines.append(" ".join(str(c.header) for c in part.columns))
            lines += [" ".join(" ".join(str(cell) for cell in row).split())
                      for row in zip(*(list(c.cells) for c in part.columns))]
        else:
            lines += part.plain.splitlines()
    return lines


def test_summary_single_objective(single_study: optuna.Study) -> None:
    lines = _summary(single_study)
    assert "completed 3" in lines and "pruned 1" in lines and "failed 1" in lines
    assert "throughput_samples_per_s (max) 1.00 k samples/s 1.50 k samples/s #1 +50.0 %" in lines  # never "better"
    assert "No confirmation re-runs are recorded: every number below is a single run." in lines
    assert "parallel.mode data subgrid" in lines
    assert "parallel.num_subgrids 4" in lines
    assert "training.lr 0.01 0.02" in lines


def _default_then_one(tmp_path: Path, default: float, mode: str, value: float) -> list[str]:
    """The summary of a throughput study: the default trial (data mode), then one trial in ``mode``."""
    study = optuna.create_study(direction="maximize")
    study.set_metric_names(["throughput_samples_per_s"])
    _run_trial(study, tmp_path, {"parallel.mode": "data"}, values=[default])
    _run_trial(study, tmp_path, {"parallel.mode": mode}, values=[value])
    return _summary(study)


def test_summary_calls_a_gain_between_identical_settings_noise(tmp_path: Path) -> None:
    lines = _default_then_one(tmp_path, 1000.0, "data", 1162.0)
    assert "throughput_samples_per_s (max) 1.00 k samples/s 1.16 k samples/s #1 +16.2 % (same settings as the default: run-to-run noise)" in lines


def test_summary_shows_the_default_once_when_it_is_the_best(tmp_path: Path) -> None:
    lines = _default_then_one(tmp_path, 1000.0, "subgrid", 900.0)
    assert "parameter default #0 (also the best)" in lines
    assert "parallel.mode data" in lines


def test_summary_two_objectives_and_failed(pareto_study: optuna.Study, failed_study: optuna.Study) -> None:
    lines = _summary(pareto_study)
    assert "psnr_at_budget_db (max) 20.00 dB 24.00 dB #1 +4.00 dB" in lines  # a PSNR change is a difference in dB
    assert "throughput_samples_per_s (max) 1.00 k samples/s 1.40 k samples/s #2 +40.0 %" in lines
    assert "parameter default #0 Pareto #1 Pareto #2" in lines
    assert "parallel.mode data data subgrid" in lines
    assert "training.lr 0.01 0.03 0.02" in lines
    assert "parallel.num_subgrids 2" in lines
    lines = _summary(failed_study)
    assert "Study broken: 2 trials, all failed." in lines  # one outcome: a sentence
    assert "No trial completed: no best trial, no best settings." in lines
    assert math.isnan(float(trials_frame(failed_study)["throughput_samples_per_s"][0]))


def test_report_escapes_hostile_names_values_and_paths(tmp_path: Path) -> None:
    markup = "<script>alert(1)</script>"
    study = optuna.create_study(study_name="hostile", direction="maximize")
    study.set_metric_names(["throughput_samples_per_s"])
    hostile_dir = tmp_path / f"dir{markup.replace('/', '_')}"
    _run_trial(study, hostile_dir, {"parallel.mode": "data", "training.lr": 0.01}, values=[1000.0],
               diagnoses=[{**COMM_DIAGNOSIS, "evidence": markup, "knob": "$(touch PWNED)"}],
               nccl_env={"NCCL_ALGO": markup}, nccl_applied={"NCCL_ALGO": "`touch PWNED`"})
    _run_trial(study, hostile_dir, {"parallel.mode": "data", "training.lr": 0.02},
               state=TrialState.FAIL, reason=f"crash: {markup}\nsecond line", duration_s=2.0)
    page = write_study_report(study, tmp_path, title=f"study {markup}", nccl_active=True).read_text()
    assert markup not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_trials_csv_has_every_trials_quality(tmp_path: Path) -> None:
    study = optuna.create_study(study_name="q", direction="maximize")
    study.set_metric_names(["samples_per_s"])
    quality = {"psnr_db": 24.5, "train_time_s": 6.1, "steps": 30, "rays_per_s": 620.0, "samples_per_s": 5.6e4,
               "samples_per_ray": 90.0, "occupancy_fraction": 0.15}
    _run_trial(study, tmp_path, {"parallel.mode": "data"}, values=[5.6e4], quality=quality)
    row = pd.read_csv(write_trials_csv(study, tmp_path / "trials.csv")).iloc[0]
    assert {k: row[k] for k in quality} == pytest.approx(quality)


def _study_of_workers(tmp_path: Path, concurrent: dict[str, int]) -> optuna.Study:
    """A study whose sweep workers (id -> concurrent trials) each recorded themselves and ran two trials."""
    from types import SimpleNamespace

    from ngptune.tuning.provenance import record_worker
    from ngptune.tuning.specs import PrunerSpec, SamplerSpec

    spec = SimpleNamespace(sampler=SamplerSpec(type="tpe", seed=42, n_startup_trials=5),
                           pruner=PrunerSpec(type="median", n_startup_trials=3), scene="demo",
                           base_config_path=Path("configs/small.json"),
                           settings={"encoding.n_levels": 6, "training.log_every": 5}, nccl_settings={})
    study = optuna.create_study(study_name="workers", direction="maximize")
    study.set_metric_names(["throughput_samples_per_s"])
    for i, (worker, n_jobs) in enumerate(concurrent.items()):
        record_worker(study, spec, worker, concurrent_trials=n_jobs, sampler_seed=42 + 2 * i)
        for j in range(2):
            _run_trial(study, tmp_path, {"parallel.mode": "data", "training.lr": 0.01 * (1 + 2 * i + j)},
                       values=[1000.0 + 10 * (2 * i + j)], worker=worker)
    return study


def test_report_states_sampler_seed_pruner_workers_and_the_parallel_caveat(tmp_path: Path) -> None:
    from ngptune.reporting.study_sampling import sampling_facts

    one = sampling_facts(_study_of_workers(tmp_path / "one", {"hostA:11:7": 1}))
    assert one.reproducible and one.seed == 42 and one.workers == [("hostA:11:7", 1, 42)]
    assert one.sentences() == ["Sampler: tpe (n_startup_trials=5), seed 42. Pruner: median (n_startup_trials=3, "
                               "n_warmup_steps=0, interval_steps=1, min_resource=1, max_resource=auto, "
                               "reduction_factor=3, min_early_stopping_rate=0).",
                               "Workers: 1 sweep process: hostA:11:7 (1 trial at once, sampler seed 42)."]
    assert not sampling_facts(_study_of_workers(tmp_path / "jobs", {"hostA:11:7": 2})).reproducible

    study = _study_of_workers(tmp_path / "two", {"hostA:11:7": 1, "hostB:22:9": 2})
    facts = sampling_facts(study)
    assert not facts.reproducible and facts.workers == [("hostA:11:7", 1, 42), ("hostB:22:9", 2, 44)]
    html = write_study_report(study, tmp_path / "report", title="t", nccl_active=False).read_text()
    assert "Sampler: tpe (n_startup_trials=5), seed 42. Pruner: median" in html
    assert "Workers: 2 sweep processes: hostA:11:7 (1 trial at once, sampler seed 42); hostB:22:9 (2 trials at once" in html
    assert "Not reproducible: several workers or concurrent trials interleave the trials." in html
    single_html = write_study_report(_study_of_workers(tmp_path / "solo", {"hostA:11:7": 1}), tmp_path / "r1",
                                     title="t", nccl_active=False).read_text()
    assert "Workers: 1 sweep process" in single_html and "Not reproducible" not in single_html
    # two workers in turn, one trial at a time each: a study resumed, not trials interleaved
    resumed = sampling_facts(_study_of_workers(tmp_path / "turns", {"hostA:11:7": 1, "hostA:12:8": 1}))
    assert resumed.one_after_another and not resumed.reproducible
    assert resumed.sentences()[-1] == ("The workers ran one after another (the study resumed 1 time): each resumed "
                                       "sampler is seeded with the study's seed offset by the trials done before it, "
                                       "so a re-run of this study draws the same settings only if it stops at the "
                                       "same trials.")
    assert not facts.one_after_another  # a worker with two trials at once interleaves them


def test_a_study_without_sampling_records_says_so(single_study: optuna.Study) -> None:
    from ngptune.reporting.study_sampling import sampling_facts

    facts = sampling_facts(single_study)
    assert facts.sampler == "not recorded" and facts.seed is None and facts.workers == [] and facts.reproducible
    assert facts.sentences() == ["Sampler: not recorded, seed not recorded. Pruner: not recorded.",
                                 "Workers: not recorded."]


def test_a_pruner_of_type_none_is_shown_without_options(single_study: optuna.Study) -> None:
    from ngptune.reporting.study_sampling import sampling_facts
    from ngptune.tuning.specs import PrunerSpec
    import dataclasses

    single_study.set_user_attr("pruner", dataclasses.asdict(PrunerSpec(type="none", n_startup_trials=2)))
    assert "Pruner: none." in sampling_facts(single_study).sentences()[0]


def test_the_study_section_names_scene_base_config_and_fixed_settings(tmp_path: Path) -> None:
    study = _study_of_workers(tmp_path, {"hostA:11:7": 1})
    study.set_user_attr("scene", "/data/fox")
    text = view_in_browser(write_study_report(study, tmp_path / "r", title="t", nccl_active=False)).text
    study_part = text.split("Study 'workers'")[1].split("Quality and time")[0]
    assert "scene\t/data/fox" in study_part and "base config\tconfigs/small.json" in study_part
    assert "fixed setting encoding.n_levels\t6" in study_part and "fixed setting training.log_every\t5" in study_part
    assert ("Fixed settings were chosen for this scene and may not suit another; best_config.json lists them in "
            "its comments.") in study_part


def _confirmed_study(tmp_path: Path, best_runs: list[float], default_runs: list[float], *, single: tuple[float, float],
                     name: str = "psnr") -> optuna.Study:
    """A PSNR study: the default and trial 1 with single-run values ``single``, and confirmation
    re-runs of both with the given values, decided as the sweep decides them."""
    from ngptune.tuning.confirm import decide

    study = optuna.create_study(study_name=name, direction="maximize")
    study.set_metric_names(["psnr_at_budget_db"])
    _run_trial(study, tmp_path, {"parallel.mode": "data"}, values=[single[0]],
               quality={"psnr_db": single[0], "train_time_s": 30.0, "samples_per_s": 1.0e6})
    _run_trial(study, tmp_path, {"parallel.mode": "subgrid"}, values=[single[1]],
               quality={"psnr_db": single[1], "train_time_s": 29.5, "samples_per_s": 1.2e6})
    runs = [{"label": label, "trial": trial, "index": i, "seed": 7 + i, "outcome": "completed", "value": value,
             "quality": {"psnr_db": value, "steps": 300 + i, "steps_per_s": 8.0 + i, "train_time_s": 8.0 + 0.5 * i}}
            for label, trial, values in (("best", 1, best_runs), ("default", 0, default_runs))
            for i, value in enumerate(values)]
    verdict = decide("psnr_at_budget_db", "maximize", best_runs, default_runs, unit="dB", best_trial=1,
                     default_trial=0)
    study.set_user_attr("confirmation", {"best_trial": 1, "default_trial": 0, "repeats": len(best_runs),
                                         "objective": "psnr_at_budget_db", "runs": runs,
                                         "verdict": verdict.to_dict()})
    return study


def _not_confirmed_study(tmp_path: Path) -> optuna.Study:
    return _confirmed_study(tmp_path, [24.1, 24.3, 23.9], [24.0, 24.2, 23.8], single=(24.0, 24.8))


def test_a_best_that_was_not_confirmed_leads_with_the_default_recommended(tmp_path: Path) -> None:
    text = view_in_browser(write_study_report(_not_confirmed_study(tmp_path), tmp_path / "r", title="t",
                                              nccl_active=False)).text
    sentence = ("The default (trial #0) is recommended: no significant difference between trial 1 and the default "
                "(gain +0.10 dB); psnr_at_budget_db: trial 1 24.10 ± 0.20 dB vs default 24.00 ± 0.20 dB, 3 re-runs each "
                "(mean ± sd); Welch's t-test p = 0.57 >= 0.05.")
    assert sentence + (" More re-runs tell a smaller difference from noise: run the sweep again with --confirm-runs 6 "
                       "(the 3 recorded each are reused).") in text  # an inconclusive result says how to go on
    assert text.index(sentence) < text.index("Confirmation re-runs") < text.index("Best single run: trial #1")
    assert "Best single run: trial #1. Recommended: trial #0 (the default), as the re-runs decided." in text
    assert "Quality and time: best vs default (single runs)" in text
    assert "Objectives, run metrics and settings: best vs default (single runs)" in text  # a title of its own
    changes = ["psnr_db\t24.00 dB\t24.80 dB\t+0.80 dB", "train_time_s\t30.0 s\t29.5 s\t-0.5 s",
               "samples_per_s\t1.00 M samples/s\t1.20 M samples/s\t+20.0 %",
               "psnr_at_budget_db (max)\t24.00 dB\t24.80 dB\t+0.80 dB"]
    assert [row for row in changes if row not in text] == []
    assert "better" not in text.split("Quality and time")[1].split("Trials")[0]
    # the re-runs decided: the recommendation reads as a result, not in the warning colour
    page = (tmp_path / "r" / "report.html").read_text()
    assert '<p class="note">The default (trial #0) is recommended: no significant difference' in page


def test_a_default_that_won_its_single_run_is_shown_beside_the_runner_up(tmp_path: Path) -> None:
    study = _confirmed_study(tmp_path, [24.6, 24.8, 24.7], [24.0, 24.1, 23.9], single=(25.0, 24.0))
    lines = _summary(study)
    assert lines[0].startswith("Trial #1 is recommended: confirmed: trial 1 beats the default")
    assert "quantity default #0, single run runner-up #1, single run" in lines
    assert "psnr_db 25.00 dB 24.00 dB" in lines


class _Tables(html.parser.HTMLParser):
    """Section headings (h2) and the cell texts of each table under them, in page order."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: list[tuple[str, list[list[list[str]]]]] = []
        self._in: str | None = None
        self._text = ""

    def handle_starttag(self, tag, attrs):
        if tag == "h2":
            self._in, self._text = "h2", ""
        elif tag == "table" and self.sections:
            self.sections[-1][1].append([])
        elif tag == "tr" and self.sections and self.sections[-1][1]:
            self.sections[-1][1][-1].append([])
        elif tag in ("td", "th"):
            self._in, self._text = "cell", ""

    def handle_endtag(self, tag):
        if tag == "h2" and self._in == "h2":
            self.sections.append((self._text.strip(), []))
            self._in = None
        elif tag in ("td", "th") and self._in == "cell":
            if self.sections and self.sections[-1][1] and self.sections[-1][1][-1]:
                self.sections[-1][1][-1][-1].append(self._text.strip())
            self._in = None

    def handle_data(self, data):
        if self._in:
            self._text += data


def test_the_reports_first_comparison_reads_the_confirmation_runs(tmp_path: Path) -> None:
    # the default paid its start-up in its single run (a lucky best by +10.5 dB); the re-runs say +1.6 dB
    study = _confirmed_study(tmp_path, [28.4, 29.5, 28.8], [27.2, 27.4, 27.3], single=(18.4, 28.9))
    page = _Tables()
    page.feed(write_study_report(study, tmp_path / "r", title="t", nccl_active=False).read_text())
    headings = [h for h, _ in page.sections]
    assert headings[:2] == ["Recommendation", "Confirmation re-runs"]
    first_table = next(tables[0] for _, tables in page.sections if tables)
    assert first_table[0] == ["quantity", "default #0", "trial #1", "difference of means"]
    assert first_table[1] == ["psnr_at_budget_db", "27.30 ± 0.10 dB (n=3)", "28.90 ± 0.56 dB (n=3)", "+1.60 dB"]
    assert ["steps", "301 ± 1 (n=3)", "301 ± 1 (n=3)", "+0.0 %"] in first_table
    assert ["steps_per_s", "9.00 ± 1.00 steps/s (n=3)", "9.00 ± 1.00 steps/s (n=3)", "+0.0 %"] in first_table
    assert ["train_time_s", "8.5 ± 0.5 s (n=3)", "8.5 ± 0.5 s (n=3)", "+0.0 s"] in first_table
    cells = {c for row in first_table for c in row}
    assert not any("18.4" in c or "10.5" in c for c in cells)  # the single runs are not the headline
    quality = dict(page.sections)[next(h for h in headings if h.startswith("Quality and time"))][0]
    assert quality[0][:3] == ["quantity", "default #0, single run", "best #1, single run"]
    lines = _summary(study)
    headline = next(i for i, line in enumerate(lines) if line.startswith("Confirmation re-runs: trial #1 vs default #0"))
    assert lines[0].startswith("Trial #1 is recommended: confirmed: trial 1 beats the default")
    assert "psnr_at_budget_db 27.30 ± 0.10 dB (n=3) 28.90 ± 0.56 dB (n=3) +1.60 dB" in lines[headline:headline + 8]
    assert headline < next(i for i, line in enumerate(lines) if "(single runs)" in line)


def test_the_default_trial_is_shown_with_its_base_config_values(tmp_path: Path) -> None:
    from trainer.contract.config import TrainConfig, apply_overrides, dump_config

    study = optuna.create_study(study_name="hash", direction="maximize")
    study.set_metric_names(["throughput_samples_per_s"])
    _run_trial(study, tmp_path, {}, values=[1000.0])  # 15 lies outside 11..13: the default samples nothing
    config_path = Path(study.trials[0].user_attrs["config_path"])
    config_path.parent.mkdir(parents=True)
    config_path.write_text(dump_config(apply_overrides(TrainConfig(), {"encoding.log2_hashmap_size": 15})))
    _run_trial(study, tmp_path, {"encoding.log2_hashmap_size": 11}, values=[1300.0])
    _run_trial(study, tmp_path, {"encoding.log2_hashmap_size": 11}, values=[1290.0])
    text = view_in_browser(write_study_report(study, tmp_path / "r", title="t", nccl_active=False)).text
    assert "no parameter takes more than one value" not in text
    assert "1 varying parameters" in text  # the marginal plot of encoding.log2_hashmap_size: 15 and 11
    assert "encoding.log2_hashmap_size\t15\t11" in text.split("Settings that differ from the default")[1]
    assert "encoding.log2_hashmap_size=11\t" in text and "=11.0" not in text


def test_a_parameter_the_default_left_null_shows_what_its_run_chose_never_a_blank(tmp_path: Path) -> None:
    """The default trial samples no parameter whose base value is null (the trainer chooses it from
    the scene): the report, the summary and trials.csv show the value its run recorded (status.json's
    derived_settings) marked "(derived)", or "derived" where the run recorded none."""
    from trainer.contract.config import TrainConfig, dump_config

    study = optuna.create_study(study_name="nulls", direction="maximize")
    study.set_metric_names(["psnr_at_budget_db"])
    _run_trial(study, tmp_path, {}, values=[20.0], derived={"training.cone_angle": 0.00390625})  # distortion: none
    config_path = Path(study.trials[0].user_attrs["config_path"])
    config_path.parent.mkdir(parents=True)
    config_path.write_text(dump_config(TrainConfig()))  # cone_angle and distortion_weight null
    _run_trial(study, tmp_path, {"training.cone_angle": 0.0, "loss.distortion_weight": 0.01}, values=[21.0])
    _run_trial(study, tmp_path, {"training.cone_angle": 0.015625, "loss.distortion_weight": 0.05}, values=[20.5])
    lines = _summary(study)
    assert "parameter default #0 best #1" in lines
    assert "training.cone_angle 0.00390625 (derived) 0.0" in lines
    assert "loss.distortion_weight derived 0.01" in lines
    assert any(line.startswith("(derived): the default's config leaves the setting null") for line in lines)
    text = view_in_browser(write_study_report(study, tmp_path / "r", title="t", nccl_active=False)).text
    differing = text.split("Settings that differ from the default")[1].split("\nTrials\n")[0]
    assert "training.cone_angle\t0.00390625 (derived)\t0.0" in differing
    # no value recorded: unknown, so not called a difference
    assert "loss.distortion_weight\t" not in differing
    assert ("Not compared with the default: loss.distortion_weight (best #1: 0.01). The default's config leaves "
            "these settings null") in differing
    assert "(derived): the default's config leaves the setting null and the trainer chose the value" in differing
    assert "#0 default\tcompleted" in text and "training.cone_angle=0.00390625 (derived)\nloss.distortion_weight=derived" in text
    csv = pd.read_csv(write_trials_csv(study, tmp_path / "trials.csv"), keep_default_na=False, dtype=str)
    assert csv.loc[0, "param_training.cone_angle"] == "0.00390625" and csv.loc[0, "param_loss.distortion_weight"] == ""
    assert list(csv["param_training.cone_angle"][1:]) == ["0.0", "0.015625"]
    # trials.csv holds numbers only: a value the run did not record is an empty cell, not "derived"
    numbers = pd.read_csv(tmp_path / "trials.csv")
    assert numbers["param_loss.distortion_weight"].dtype == float
    assert numbers["param_loss.distortion_weight"].mean() == pytest.approx(0.03)


def test_the_terminal_summary_leads_with_a_recommendation_that_was_not_confirmed(tmp_path: Path) -> None:
    lines = _summary(_not_confirmed_study(tmp_path))
    first_table = next(i for i, line in enumerate(lines) if "(single runs)" in line)
    recommended = next(i for i, line in enumerate(lines) if line.startswith("The default (trial #0) is recommended"))
    assert recommended == 0 < first_table  # before the outcome table too
    assert "Best vs default (single runs)" in lines
    assert "psnr_at_budget_db (max) 24.00 dB 24.80 dB #1 +0.80 dB" in lines


LAYOUT_PROBE = """() => {
  const section = document.querySelector('section#trials');
  const table = section.querySelector('table');
  const rows = [...table.querySelectorAll('tbody tr')].map(r => r.getBoundingClientRect().height);
  const cellAlign = (tableEl, header) => {
    const heads = [...tableEl.querySelectorAll('thead th')].map(h => h.textContent);
    const i = heads.indexOf(header);
    return [...tableEl.querySelectorAll('tbody tr')].map(r => getComputedStyle(r.children[i]).textAlign);
  };
  const bottlenecks = document.querySelector('section#bottlenecks-per-trial table');
  const labels = [];
  for (const plot of document.querySelectorAll('section#parallel-coordinates div.plotly-graph-div')) {
    const svg = plot.querySelector('svg.main-svg').getBoundingClientRect();
    for (const t of plot.querySelectorAll('g.xtick text')) {
      const box = t.getBoundingClientRect();
      labels.push({text: t.textContent, inside: box.left >= svg.left - 1 && box.right <= svg.right + 1
                   && box.top >= svg.top - 1 && box.bottom <= svg.bottom + 1, left: box.left, right: box.right,
                   top: box.top, bottom: box.bottom});
    }
  }
  return {tableWidth: table.getBoundingClientRect().width, sectionWidth: section.getBoundingClientRect().width,
          tallestRow: Math.max(...rows), evidence: cellAlign(bottlenecks, 'evidence'),
          numbers: cellAlign(table, 'duration_s'), labels: labels};
}"""


def test_the_report_reads_as_a_person_reads_it(single_study: optuna.Study, tmp_path: Path) -> None:
    """Units and precision in the tables, a trials table that fits the page with short rows,
    left-aligned text, whole parallel-coordinate labels."""
    path = write_study_report(single_study, tmp_path / "report", title="Sweep single", nccl_active=False)
    view = view_in_browser(path, probe=LAYOUT_PROBE)
    assert view.errors == [] and view.plots_rendered == view.plots_total
    text, layout = view.text, view.probe
    assert "run throughput_samples_per_s\t950 samples/s\t1.50 k samples/s\t+57.9 %" in text
    assert "run eval_psnr_db\t21.50 dB\t22.25 dB\t+0.75 dB" in text
    assert "run eval_psnr_db the last evaluation during training (a pruner's mark on its few views" in text
    assert "12.5 s" in text.split("Trials\n")[-1]  # a trial's duration
    assert layout["tableWidth"] <= layout["sectionWidth"] + 1, layout  # no sideways scrolling
    assert layout["tallestRow"] < 120, layout
    assert set(layout["evidence"]) == {"left"} and set(layout["numbers"]) == {"right"}, layout
    labels = layout["labels"]
    assert {label["text"] for label in labels} == {"throughput_samples_per_s", "parallel.mode",
                                                   "parallel.num_subgrids", "training.lr"}, labels  # whole names
    assert all(label["inside"] for label in labels), labels  # no label cut at the figure's edge
    ordered = sorted(labels, key=lambda label: label["left"])
    for a, b in zip(ordered, ordered[1:]):  # neighbours do not overlap
        assert a["right"] <= b["left"] + 1 or a["bottom"] <= b["top"] + 1 or b["bottom"] <= a["top"] + 1, (a, b)


def test_no_one_bar_chart_when_the_best_is_the_default(tmp_path: Path) -> None:
    study = optuna.create_study(study_name="default-best", direction="maximize")
    study.set_metric_names(["psnr_at_budget_db"])
    _run_trial(study, tmp_path, {"parallel.mode": "data", "training.lr": 0.01}, values=[24.0],
               phase_ms=PHASES_DEFAULT, metrics=[(900.0, None), (1000.0, 21.5)])
    _run_trial(study, tmp_path, {"parallel.mode": "data", "training.lr": 0.03}, values=[22.0])
    path = write_study_report(study, tmp_path / "report", title="Default best", nccl_active=False)
    view = view_in_browser(path)
    section = view.text.split("vs default\n")[-1].split("Trials\n")[0]
    assert "The best is the default trial: no chart, its values are in the table below." in section
    assert "Objectives (single runs)" not in section and "Step-time breakdown" not in section
    assert "psnr_at_budget_db (max)\t24.00 dB" in section


def test_a_default_that_won_every_single_run_is_said_in_a_sentence_not_a_table(tmp_path: Path) -> None:
    lines = _summary(_confirmed_study(tmp_path, [24.1, 24.3, 23.9], [24.0, 24.2, 23.8], single=(24.8, 24.0)))
    assert "Study psnr: 2 trials, all completed." in lines
    assert ("Best vs default: the default (trial #0) has the best single-run value of every objective."
            in " ".join(" ".join(lines).split()))
    assert "Best vs default (single runs)" not in lines and not any("trials by outcome" in line for line in lines)


def test_confirmation_bars_carry_mean_and_count_inside_each_bar_clear_of_its_error_bar():
    from ngptune.reporting.study_confirmation import ConfirmationSummary, Spread
    from ngptune.reporting.study_plots import confirmation_bars

    summary = ConfirmationSummary(
        objective="psnr_db", candidate=4, default=0, repeats=3, verdict=None,
        rows={"psnr_db": (Spread.of([19.1, 19.3, 19.6]), Spread.of([19.0, 19.2, 19.6])),
              "steps": (Spread.of([80, 82]), Spread.of([]))})
    fig = confirmation_bars(summary)
    assert [list(trace.x) for trace in fig.data] == [["default #0", "trial #4"]] * 2
    psnr, steps = fig.data
    assert psnr.textposition == "inside" and psnr.insidetextanchor == "middle"  # labels mid-bar
    assert list(psnr.error_y.array) == pytest.approx([Spread.of([19.1, 19.3, 19.6]).sd, Spread.of([19.0, 19.2, 19.6]).sd])
    assert psnr.text[0].endswith("(n=3)") and steps.text[0].endswith("(n=2)") and steps.text[1] == ""



@pytest.mark.parametrize("speed", ["steps_per_s", "rays_per_s"])
def test_an_objective_named_like_a_quality_column_is_one_column_and_the_report_is_written(
        tmp_path: Path, speed: str) -> None:
    """Objectives psnr_at_budget_db and a speed (studies/README.md pairs them) that is also a quality
    column: trials.csv has it once, and report.html is written with it in the trials table (rays_per_s
    too, a quality column the page's table otherwise leaves out)."""
    study = optuna.create_study(study_name="speed", directions=["maximize", "maximize"])
    study.set_metric_names(["psnr_at_budget_db", speed])
    _run_trial(study, tmp_path, {"parallel.mode": "data"}, values=[20.0, 50.0],
               quality={"psnr_db": 20.0, "steps_per_s": 50.0, "rays_per_s": 50.0, "samples_per_s": 4e5})
    _run_trial(study, tmp_path, {"parallel.mode": "subgrid"}, values=[21.0, 40.0],
               quality={"psnr_db": 21.0, "steps_per_s": 40.0, "rays_per_s": 40.0, "samples_per_s": 3e5})
    frame = trials_frame(study)
    assert list(frame.columns).count(speed) == 1 and list(frame[speed]) == [50.0, 40.0]
    csv = pd.read_csv(write_trials_csv(study, tmp_path / "trials.csv"))
    assert list(csv.columns).count(speed) == 1 and f"{speed}.1" not in csv.columns
    assert list(csv["samples_per_s"]) == [4e5, 3e5]
    text = view_in_browser(write_study_report(study, tmp_path / "r", title="t", nccl_active=False)).text
    header = text.split("\nTrials\n")[1].splitlines()[3]
    assert header.startswith(f"trial\toutcome\tduration_s\tpsnr_at_budget_db\t{speed}\tpsnr_db\t"), header


def test_a_conditional_parameter_the_default_used_shows_its_value_though_other_trials_lack_it(tmp_path: Path) -> None:
    """training.cone_angle sampled only in data mode (``when``, as the study's definition records
    it), null in the base config: the default ran data mode and so used it; subgrid trials lack it,
    yet the default's column, its trials-table row and trials.csv show the value its run chose."""
    from trainer.contract.config import TrainConfig, dump_config

    study = optuna.create_study(study_name="when", direction="maximize")
    study.set_metric_names(["psnr_at_budget_db"])
    study.set_user_attr("definition", {"params": [
        {"name": "parallel.mode", "when": []},
        {"name": "parallel.num_subgrids", "when": [["parallel.mode", ["subgrid"]]]},
        {"name": "training.cone_angle", "when": [["parallel.mode", ["data"]]]}]})
    _run_trial(study, tmp_path, {"parallel.mode": "data"}, values=[20.0], derived={"training.cone_angle": 0.00390625})
    config_path = Path(study.trials[0].user_attrs["config_path"])
    config_path.parent.mkdir(parents=True)
    config_path.write_text(dump_config(TrainConfig()))  # cone_angle null
    _run_trial(study, tmp_path, {"parallel.mode": "data", "training.cone_angle": 0.0}, values=[21.0])
    _run_trial(study, tmp_path, {"parallel.mode": "subgrid", "parallel.num_subgrids": 4}, values=[20.5])
    assert "training.cone_angle 0.00390625 (derived) 0.0" in _summary(study)
    csv = pd.read_csv(write_trials_csv(study, tmp_path / "trials.csv"), keep_default_na=False, dtype=str)
    assert list(csv["param_training.cone_angle"]) == ["0.00390625", "0.0", ""]
    assert list(csv["param_parallel.num_subgrids"]) == ["", "", "4"]  # data mode: the default did not use it
    text = view_in_browser(write_study_report(study, tmp_path / "r", title="t", nccl_active=False)).text
    assert "#0 default\tcompleted\t" in text
    assert "parallel.mode=data\ntraining.cone_angle=0.00390625 (derived)\t" in text


def test_the_parallel_coordinates_show_the_default_at_the_value_its_run_derived_never_not_used(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default's derived log2_hashmap_size 15 lies off the sampled grid 12, 14, 16, and its
    distortion_weight is "derived" (no value recorded) on a float axis: neither reads "not used"."""
    from ngptune.reporting.study_data import StudyView
    from ngptune.reporting.study_plots import ABSENT_TEXT, absent_values_named, plotted_study
    from trainer.contract.config import TrainConfig, dump_config

    monkeypatch.setitem(SPACE, "encoding.log2_hashmap_size", IntDistribution(12, 16, step=2))
    monkeypatch.setitem(SPACE, "loss.distortion_weight", FloatDistribution(0.0, 0.1))
    study = optuna.create_study(study_name="grid", direction="maximize")
    study.set_metric_names(["psnr_at_budget_db"])
    _run_trial(study, tmp_path, {}, values=[20.0], derived={"encoding.log2_hashmap_size": 15})
    config_path = Path(study.trials[0].user_attrs["config_path"])
    config_path.parent.mkdir(parents=True)
    config_path.write_text(dump_config(TrainConfig()))  # both null
    _run_trial(study, tmp_path, {"encoding.log2_hashmap_size": 12, "loss.distortion_weight": 0.01}, values=[21.0])
    _run_trial(study, tmp_path, {"encoding.log2_hashmap_size": 16, "loss.distortion_weight": 0.05}, values=[20.5])
    plotted = plotted_study(StudyView.of(study))
    assert plotted.trials[0].params == {"encoding.log2_hashmap_size": 15, "loss.distortion_weight": "derived"}
    names = ["psnr_at_budget_db", "encoding.log2_hashmap_size", "loss.distortion_weight"]
    fig = absent_values_named(optuna.visualization.plot_parallel_coordinate(plotted), plotted, names)
    texts = [a.text for a in fig.layout.annotations]
    assert ABSENT_TEXT not in texts and "None" not in texts and "derived" in texts and "15" in texts
    default_line = next(trace.customdata for trace in fig.data
                        if trace.customdata is not None and trace.customdata[0][1] == "20")
    assert [value for _, value in default_line[1:]] == ["15", "derived"]
    assert "Parallel coordinates" in write_study_report(study, tmp_path / "r", title="t", nccl_active=False).read_text()


def test_the_derived_note_stands_under_the_trials_table_when_the_default_is_the_best(tmp_path: Path) -> None:
    """The best trial is the default, so there is no settings-diff table; the trials table shows
    "(derived)" and "derived", and the note explaining them stands under it."""
    from trainer.contract.config import TrainConfig, dump_config

    study = optuna.create_study(study_name="best_default", direction="maximize")
    study.set_metric_names(["psnr_at_budget_db"])
    _run_trial(study, tmp_path, {}, values=[22.0], derived={"training.cone_angle": 0.00390625})
    config_path = Path(study.trials[0].user_attrs["config_path"])
    config_path.parent.mkdir(parents=True)
    config_path.write_text(dump_config(TrainConfig()))
    _run_trial(study, tmp_path, {"training.cone_angle": 0.0, "loss.distortion_weight": 0.01}, values=[21.0])
    text = view_in_browser(write_study_report(study, tmp_path / "r", title="t", nccl_active=False)).text
    assert "Settings that differ from the default" not in text
    trials = text.split("\nTrials\n")[1].split("\nBottlenecks per trial\n")[0]
    assert "training.cone_angle=0.00390625 (derived)\nloss.distortion_weight=derived" in trials
    assert "(derived): the default's config leaves the setting null and the trainer chose the value" in trials


def test_a_setting_the_default_recorded_no_value_for_is_not_called_a_difference(tmp_path: Path) -> None:
    """The default's run recorded no value for loss.distortion_weight (null in its config): the best's
    0.01 is not listed as differing, nor is the best said to run the default settings."""
    from trainer.contract.config import TrainConfig, dump_config

    study = optuna.create_study(study_name="unknown", direction="maximize")
    study.set_metric_names(["psnr_at_budget_db"])
    _run_trial(study, tmp_path, {}, values=[20.0])
    config_path = Path(study.trials[0].user_attrs["config_path"])
    config_path.parent.mkdir(parents=True)
    config_path.write_text(dump_config(TrainConfig()))
    _run_trial(study, tmp_path, {"loss.distortion_weight": 0.01}, values=[21.0])
    text = view_in_browser(write_study_report(study, tmp_path / "r", title="t", nccl_active=False)).text
    differing = text.split("Settings that differ from the default")[1].split("\nTrials\n")[0]
    assert "loss.distortion_weight\t" not in differing and "the best trial ran the default settings" not in differing
    assert "None of the settings that can be compared." in differing
    assert "Not compared with the default: loss.distortion_weight (best #1: 0.01)." in differing


def test_a_setting_that_followed_the_best_trials_own_setting_is_listed_as_derived(tmp_path: Path) -> None:
    """The best trial was given F = 2 and its run chose log2 T = 19 (T follows F) where the default's
    chose 18: the settings that differ list both, T marked "(derived)" in each column; a derived
    value both runs chose alike (the cone angle) is not listed."""
    from trainer.contract.config import TrainConfig, dump_config

    study = optuna.create_study(study_name="followed", direction="maximize")
    study.set_metric_names(["psnr_at_budget_db"])
    _run_trial(study, tmp_path, {}, values=[20.0], derived={
        "encoding.n_features_per_level": 4, "encoding.log2_hashmap_size": 18, "training.cone_angle": 0.00390625})
    config_path = Path(study.trials[0].user_attrs["config_path"])
    config_path.parent.mkdir(parents=True)
    config_path.write_text(dump_config(TrainConfig()))
    _run_trial(study, tmp_path, {"encoding.n_features_per_level": 2}, values=[21.0],
               derived={"encoding.log2_hashmap_size": 19, "training.cone_angle": 0.00390625})
    text = view_in_browser(write_study_report(study, tmp_path / "r", title="t", nccl_active=False)).text
    differing = text.split("Settings that differ from the default")[1].split("\nTrials\n")[0]
    assert "encoding.log2_hashmap_size\t18 (derived)\t19 (derived)" in differing
    assert "encoding.n_features_per_level\t4 (derived)\t2\n" in differing and "training.cone_angle" not in differing
    assert "(derived): the default's config leaves the setting null" in differing


def test_an_attempt_at_the_default_that_failed_is_named_in_the_trials_table(tmp_path: Path) -> None:
    """Trial 0, the default, crashed and trial 1 retried it and completed: #1 is the default, #0
    reads "default, earlier attempt" rather than nothing."""
    study = optuna.create_study(study_name="retried_default", direction="maximize")
    study.set_metric_names(["psnr_at_budget_db"])
    _run_trial(study, tmp_path, {}, state=TrialState.FAIL, reason=CRASH_REASON)
    _run_trial(study, tmp_path, {}, values=[20.0], is_default=True)
    _run_trial(study, tmp_path, {"training.lr": 0.02}, values=[21.0])
    text = view_in_browser(write_study_report(study, tmp_path / "r", title="t", nccl_active=False)).text
    trials = text.split("\nTrials\n")[1]
    assert "#0 default, earlier attempt" in trials and "#1 default" in trials and "#2 best" in trials


def test_a_reason_that_ends_with_its_log_gives_the_log_once_in_the_trials_table(tmp_path: Path) -> None:
    """The sweep ends a failed trial's reason with "; log: PATH"; the trials table gives the log on
    a line of its own, so the reason loses that ending there."""
    study = optuna.create_study(study_name="log_once", direction="maximize")
    study.set_metric_names(["psnr_at_budget_db"])
    _run_trial(study, tmp_path, {}, values=[20.0])
    _run_trial(study, tmp_path, {"training.lr": 0.02}, state=TrialState.FAIL,
               reason="stopped by SIGKILL from outside the sweep (exit status -9); log: /x/trials/0001.launch.log")
    text = view_in_browser(write_study_report(study, tmp_path / "r", title="t", nccl_active=False)).text
    trials = text.split("\nTrials\n")[1]
    assert "failed: stopped by SIGKILL from outside the sweep (exit status -9)\nlog:" in trials, trials
    assert trials.count("log:") == 1


def test_a_spread_gives_its_sd_with_the_means_decimals_and_prefix():
    from ngptune.reporting.study_confirmation import Spread, spread_text

    assert spread_text(Spread.of([29.29, 28.64, 30.0]), "psnr_at_budget_db") == "29.31 ± 0.68 dB (n=3)"
    assert spread_text(Spread.of([22.1, 36.7]), "steps_per_s") == "29.4 ± 10.3 steps/s (n=2)"
    assert spread_text(Spread.of([6640, 6650]), "steps") == "6645 ± 7 (n=2)"
    assert spread_text(Spread.of([6.1e6, 6.3e6]), "throughput_samples_per_s") == "6.20 M ± 0.14 M samples/s (n=2)"
    assert spread_text(Spread.of([]), "steps") == "no run"


def test_a_default_that_completed_alone_is_not_said_to_have_won() -> None:
    from types import SimpleNamespace

    from ngptune.reporting.study_recommendation import recommendation

    default, runner_up = SimpleNamespace(number=0), SimpleNamespace(number=1)
    alone = SimpleNamespace(best=[default], completed=[default], default=default, study=SimpleNamespace(user_attrs={}))
    assert recommendation(alone).sentence == ("The default (trial #0) is recommended unconfirmed: no other trial "
                                              "completed, so nothing was re-run against it.")
    won = SimpleNamespace(best=[default], completed=[default, runner_up], default=default,
                          study=SimpleNamespace(user_attrs={}))
    assert recommendation(won).sentence.endswith("it won its single run and no re-runs are recorded.")


def test_nccl_is_said_inactive_for_its_reason() -> None:
    from types import SimpleNamespace

    from ngptune.reporting.study_report import nccl_inactive_text

    def view(nproc):
        return SimpleNamespace(study=SimpleNamespace(user_attrs={"nproc_per_node": nproc}))

    assert nccl_inactive_text(view(1)) == "NCCL parameters inactive (one process per trial, so no collectives)"
    assert nccl_inactive_text(view(2)) == "NCCL parameters inactive (gloo backend)"
