"""Confirmation of a study's best against its default, with a fake objective instead of training."""

from __future__ import annotations

import optuna
import pytest

from ngptune.tuning.confirm import CONFIRMATION_ATTR, ConfirmRun, confirm_study, decide, run_order, verdict_runs


def _study(best_value: float, default_value: float) -> optuna.Study:
    """Trial 0 (the default) and trial 1 (the best of the search) with the given PSNR (dB)."""
    study = optuna.create_study(direction="maximize")
    for value in (default_value, best_value):
        study.add_trial(optuna.trial.create_trial(value=value, params={}, distributions={}))
    return study


def _fake_launch(values: dict[str, list[float | None]], calls: list):
    def launch(label, trial, index, seed) -> ConfirmRun:
        calls.append((label, index, seed))
        value = values[label][index]
        return ConfirmRun(label, trial.number, index, seed, value, {"psnr_db": value},
                          "completed" if value is not None else "failed")
    return launch


def _confirm(study, values, calls, repeats=2):
    best, default = study.trials[1], study.trials[0]
    return confirm_study(study, best=best, default=default, repeats=repeats, objective="psnr_at_budget_db",
                         direction="maximize", unit="dB", base_seed=1337, launch=_fake_launch(values, calls))


def test_a_best_that_regresses_on_re_run_is_not_recommended() -> None:
    study = _study(best_value=26.0, default_value=25.0)  # the search's best: +1 dB, by luck
    calls: list = []
    verdict = _confirm(study, {"best": [24.9, 25.0], "default": [25.1, 24.9]}, calls)
    assert verdict.status == "no_significant_difference" and verdict.recommend == "default" and not verdict.confirmed
    assert verdict.gain == pytest.approx(-0.05) and "the default is recommended" in verdict.sentence
    assert verdict.sentence.startswith("no significant difference between trial 1 and the default")
    assert verdict.p_value == pytest.approx(0.7117, abs=1e-3) and "Welch" in verdict.test
    assert [(label, i) for label, i, _ in calls] == run_order(2)
    assert {seed for *_, seed in calls} == {2337, 2338}  # new seeds, shared by each pair


def test_a_best_that_holds_up_is_confirmed_with_its_evidence() -> None:
    study = _study(best_value=26.0, default_value=25.0)
    verdict = _confirm(study, {"best": [26.1, 25.9], "default": [25.0, 25.2]}, [])
    assert verdict.status == "confirmed" and verdict.recommend == "best" and verdict.confirmed
    assert verdict.gain == pytest.approx(0.9) and verdict.p_value < 0.05
    assert "26.00 ± 0.14 dB vs default 25.10 ± 0.14 dB" in verdict.sentence


def test_the_p_value_is_welchs_two_sided_t_test() -> None:
    from scipy import stats

    from ngptune.tuning.confirm import welch_p_value

    best, default = [26.1, 25.9, 26.3], [25.0, 25.2, 24.1]
    assert welch_p_value(best, default) == pytest.approx(stats.ttest_ind(best, default, equal_var=False).pvalue)
    # Welch's t by hand: t = (mean_b - mean_d) / sqrt(s_b²/n + s_d²/n), Welch-Satterthwaite df
    import statistics
    vb, vd = statistics.variance(best) / 3, statistics.variance(default) / 3
    t = (statistics.fmean(best) - statistics.fmean(default)) / (vb + vd) ** 0.5
    df = (vb + vd) ** 2 / (vb ** 2 / 2 + vd ** 2 / 2)
    assert welch_p_value(best, default) == pytest.approx(2 * stats.t.sf(abs(t), df))
    assert welch_p_value([1.0, 1.0], [2.0, 2.0]) == 0.0 and welch_p_value([1.0, 1.0], [1.0, 1.0]) == 1.0
    with pytest.raises(ValueError, match="two values per sample"):
        welch_p_value([1.0], [1.0, 2.0])


def test_a_default_significantly_better_is_recommended_as_confirmed() -> None:
    verdict = decide("psnr_at_budget_db", "maximize", [24.0, 24.1, 23.9], [25.0, 25.1, 24.9], best_trial=3,
                     default_trial=0)
    assert verdict.status == "default_better" and verdict.recommend == "default" and verdict.confirmed
    assert verdict.sentence.startswith("the default is significantly better than trial 3")


def test_a_gain_inside_the_noise_is_not_confirmed() -> None:
    verdict = decide("psnr_at_budget_db", "maximize", [26.0, 24.0], [25.0, 24.8])  # +0.1 dB, se 0.71
    assert verdict.status == "no_significant_difference" and verdict.recommend == "default"
    assert not verdict.confirmed and "no significant difference" in verdict.sentence


def test_minimised_objectives_and_failed_re_runs() -> None:
    assert decide("time_to_psnr_s", "minimize", [10.0, 11.0], [20.0, 21.0]).status == "confirmed"
    crashed = decide("time_to_psnr_s", "minimize", [10.0, None], [20.0, 21.0], best_trial=2)
    assert crashed.status == "not_confirmed" and crashed.recommend == "default" and "1 of its 2" in crashed.sentence
    no_default = decide("time_to_psnr_s", "minimize", [10.0, 11.0], [None, 21.0])
    assert no_default.status == "unconfirmed" and no_default.recommend == "best"


def test_a_re_run_resumes_the_recorded_runs() -> None:
    study = _study(best_value=26.0, default_value=25.0)
    calls: list = []

    def stop_after_two(label, trial, index, seed):
        if len(calls) == 2:
            raise KeyboardInterrupt
        return _fake_launch({"best": [26.1, 25.9], "default": [25.0, 25.2]}, calls)(label, trial, index, seed)

    with pytest.raises(KeyboardInterrupt):
        confirm_study(study, best=study.trials[1], default=study.trials[0], repeats=2, objective="psnr_at_budget_db",
                      direction="maximize", unit="dB", base_seed=1337, launch=stop_after_two)
    assert len(study.user_attrs[CONFIRMATION_ATTR]["runs"]) == 2
    resumed: list = []
    verdict = _confirm(study, {"best": [26.1, 25.9], "default": [25.0, 25.2]}, resumed)
    assert [(label, i) for label, i, _ in resumed] == run_order(2)[2:]  # only the two missing runs
    assert verdict.status == "confirmed"
    assert study.user_attrs[CONFIRMATION_ATTR]["verdict"]["status"] == "confirmed"


def test_the_default_is_never_re_run_against_itself() -> None:
    study = _study(best_value=25.0, default_value=26.0)
    calls: list = []
    with pytest.raises(ValueError, match="trial 0 is the default: re-run the best non-default trial"):
        confirm_study(study, best=study.trials[0], default=study.trials[0], repeats=2,
                      objective="psnr_at_budget_db", direction="maximize", unit="dB", base_seed=1,
                      launch=_fake_launch({}, calls))
    assert calls == []


def test_a_default_that_wins_by_one_lucky_run_is_re_run_against_the_runner_up() -> None:
    from ngptune.tuning.outputs import candidate_trial

    study = optuna.create_study(direction="maximize")
    for value in (23.82, 21.0, 19.5, 22.9, 20.2):  # trial 0, the default, won its single run by luck
        study.add_trial(optuna.trial.create_trial(value=value, params={}, distributions={}))
    default = study.trials[0]
    assert study.best_trial.number == default.number
    runner_up = candidate_trial(study, default)
    assert runner_up.number == 3
    calls: list = []
    values = {"best": [22.4, 22.6, 22.5], "default": [20.1, 19.8, 20.3]}  # re-trained, the default falls back
    verdict = confirm_study(study, best=runner_up, default=default, repeats=3, objective="psnr_at_budget_db",
                            direction="maximize", unit="dB", base_seed=1337, launch=_fake_launch(values, calls),
                            default_won_single_run=True)
    assert [(label, i) for label, i, _ in calls] == run_order(3)
    assert verdict.status == "confirmed" and verdict.recommend == "best" and verdict.best_trial == 3
    assert "the runner-up: the default won its single run" in verdict.sentence
    record = study.user_attrs[CONFIRMATION_ATTR]
    assert (record["best_trial"], record["default_trial"], len(record["runs"])) == (3, 0, 6)
    # the runner-up inside the noise: the default stays, and the sentence says there is no difference
    level = decide("psnr_at_budget_db", "maximize", [20.0, 21.0, 20.5], [20.4, 20.9, 20.1], best_trial=3,
                   default_trial=0, default_won_single_run=True)
    assert level.status == "no_significant_difference" and level.recommend == "default" and not level.confirmed


def test_a_confirmation_file_cannot_say_confirmed_without_runs(tmp_path) -> None:
    import json
    from types import SimpleNamespace

    from ngptune.tuning.confirm import no_candidate, unconfirmed
    from ngptune.tuning.layout import StudyDir
    from ngptune.tuning.outputs import write_confirmation

    study_dir = StudyDir(tmp_path)
    trial = SimpleNamespace(number=0)
    confirmed = decide("psnr_at_budget_db", "maximize", [26.1, 25.9], [25.0, 25.2], best_trial=1, default_trial=0)
    assert confirmed.confirmed
    with pytest.raises(ValueError, match="without the re-runs of both configurations"):
        write_confirmation(confirmed, trial, study_dir, [])
    assert not study_dir.confirmation_path.exists()
    for verdict in (no_candidate("psnr_at_budget_db", "maximize", 0),
                    unconfirmed("psnr_at_budget_db", "maximize", "confirmation skipped (--no-confirm)",
                                best_trial=1, default_trial=0, recommend="default"), None):
        written = json.loads(write_confirmation(verdict, trial, study_dir, []).read_text())
        assert written["verdict"]["confirmed"] is False and written["runs"] == []
    runs = [{"label": label, "trial": n, "index": i, "value": v} for label, n, values in
            (("best", 1, [26.1, 25.9]), ("default", 0, [25.0, 25.2])) for i, v in enumerate(values)]
    written = json.loads(write_confirmation(confirmed, SimpleNamespace(number=1), study_dir, runs).read_text())
    assert written["verdict"]["confirmed"] is True and len(written["runs"]) == 4 and "failed_runs" not in written
    failed = [{"label": "default", "trial": 0, "index": 0, "value": None, "outcome": "failed",
               "reason": "crash (exit status -9)"}]
    written = json.loads(write_confirmation(confirmed, SimpleNamespace(number=1), study_dir, runs, failed).read_text())
    assert written["failed_runs"] == failed  # the failures before the runs that decided stay in the evidence


def test_more_re_runs_or_a_new_best_reuse_the_recorded_runs() -> None:
    study = _study(best_value=26.0, default_value=25.0)
    study.add_trial(optuna.trial.create_trial(value=27.0, params={}, distributions={}))  # trial 2
    first: list = []
    _confirm(study, {"best": [26.1, 25.9, 26.0], "default": [25.0, 25.2, 25.1]}, first)
    assert len(first) == 4
    grown: list = []
    verdict = _confirm(study, {"best": [26.1, 25.9, 26.0], "default": [25.0, 25.2, 25.1]}, grown, repeats=3)
    assert [(label, i) for label, i, _ in grown] == [("best", 2), ("default", 2)]  # only index 2 is new
    assert verdict.status == "confirmed" and len(verdict.best_values) == 3
    # a later best (trial 2) is compared with the default's recorded re-runs: only its own run
    newer: list = []
    values = {"best": [27.1, 26.9, 27.0], "default": [25.0, 25.2, 25.1]}
    verdict = confirm_study(study, best=study.trials[2], default=study.trials[0], repeats=3,
                            objective="psnr_at_budget_db", direction="maximize", unit="dB", base_seed=1337,
                            launch=_fake_launch(values, newer))
    assert [label for label, *_ in newer] == ["best"] * 3 and verdict.best_trial == 2 and verdict.confirmed
    shown = verdict_runs(study.user_attrs[CONFIRMATION_ATTR], verdict)
    assert [(r["label"], r["trial"], r["index"]) for r in shown] == (
        [("best", 2, i) for i in range(3)] + [("default", 0, i) for i in range(3)])


def test_a_record_of_another_objective_is_not_reused() -> None:
    study = _study(best_value=26.0, default_value=25.0)
    _confirm(study, {"best": [26.1, 25.9], "default": [25.0, 25.2]}, [])
    calls: list = []
    confirm_study(study, best=study.trials[1], default=study.trials[0], repeats=2, objective="time_to_psnr_s",
                  direction="minimize", unit="s", base_seed=1337,
                  launch=_fake_launch({"best": [5.0, 5.1], "default": [9.0, 9.2]}, calls))
    assert len(calls) == 4


def test_a_failed_re_run_counts_once_and_runs_again_in_the_next_sweep() -> None:
    from ngptune.tuning.confirm import recorded_repeats

    study = _study(best_value=26.0, default_value=25.0)
    first: list = []
    verdict = _confirm(study, {"best": [26.1, 25.9], "default": [25.0, None]}, first)  # a rank killed from outside
    assert verdict.status == "unconfirmed" and len(first) == 4
    assert recorded_repeats(study.user_attrs[CONFIRMATION_ATTR], "psnr_at_budget_db", 1, 0) == 1
    again: list = []
    verdict = _confirm(study, {"best": [26.1, 25.9], "default": [25.0, 25.2]}, again)
    assert [(label, i) for label, i, _ in again] == [("default", 1)]  # only the failed one
    assert verdict.status == "confirmed"
    assert recorded_repeats(study.user_attrs[CONFIRMATION_ATTR], "psnr_at_budget_db", 1, 0) == 2


def test_a_default_re_run_without_a_value_leaves_the_others_as_evidence() -> None:
    verdict = decide("psnr_at_budget_db", "maximize", [19.0, 19.1, 19.2], [20.0, 20.1, None], best_trial=4,
                     default_trial=0)
    assert verdict.status == "default_better" and verdict.recommend == "default" and verdict.confirmed
    assert "3 re-runs of the candidate and 2 of the default's 3 (1 gave no value)" in verdict.sentence
    too_few = decide("psnr_at_budget_db", "maximize", [19.0, 19.1, 19.2], [20.0, None, None], best_trial=4,
                     default_trial=0)
    assert too_few.status == "unconfirmed" and "2 of the default's 3 re-runs gave no" in too_few.sentence


def test_a_failed_re_run_stays_recorded_after_the_next_sweep_runs_it_again(tmp_path) -> None:
    from ngptune.tuning.confirm import failed_runs
    from ngptune.tuning.layout import StudyDir
    from ngptune.tuning.rerun import keep_earlier_attempt

    study = _study(best_value=26.0, default_value=25.0)
    _confirm(study, {"best": [26.1, 25.9], "default": [None, 25.2]}, [])  # the default's re-run 0 fails
    record = study.user_attrs[CONFIRMATION_ATTR]
    assert [(r["label"], r["index"], r["outcome"]) for r in failed_runs(record, "psnr_at_budget_db")] == [
        ("default", 0, "failed")]
    again: list = []
    verdict = _confirm(study, {"best": [26.1, 25.9], "default": [25.0, 25.2]}, again)
    assert [(label, i) for label, i, _ in again] == [("default", 0)] and verdict.status == "confirmed"
    record = study.user_attrs[CONFIRMATION_ATTR]
    assert [r["outcome"] for r in record["runs"]] == ["completed"] * 4
    assert [(r["label"], r["index"]) for r in failed_runs(record, "psnr_at_budget_db")] == [("default", 0)]
    # what the failed attempt left on disk is moved aside, its logs kept and its model files removed
    study_dir = StudyDir(tmp_path)
    run = study_dir.confirm_run_dir(0, 0)
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "rank0.log").write_text("RuntimeError: CUDA out of memory\n")
    (run / "snapshots").mkdir()
    (run / "snapshots" / "step_0000100.pt").write_bytes(b"model")
    study_dir.confirm_log_path(0, 0).write_text("error: rank 0 failed\n")
    aside = keep_earlier_attempt(study_dir, 0, 0)
    assert aside == study_dir.earlier_attempt_dir(0, 0, 1) and not run.exists()
    assert (aside / "trial0-run0.launch.log").read_text() == "error: rank 0 failed\n"
    assert (aside / "run" / "logs" / "rank0.log").read_text().startswith("RuntimeError")
    assert not (aside / "run" / "snapshots" / "step_0000100.pt").exists()
    study_dir.confirm_log_path(0, 0).write_text("stopped\n")  # a second earlier attempt goes beside the first
    assert keep_earlier_attempt(study_dir, 0, 0) == study_dir.earlier_attempt_dir(0, 0, 2)
    assert keep_earlier_attempt(study_dir, 0, 0) is None  # nothing left: nothing moved


def test_the_recorded_extent_counts_pairs_past_a_gap() -> None:
    from ngptune.tuning.confirm import recorded_extent, recorded_repeats

    def run(trial, index, outcome="completed"):
        return {"label": "best" if trial == 1 else "default", "trial": trial, "index": index, "value": 1.0,
                "outcome": outcome}

    record = {"objective": "psnr_at_budget_db", "runs": [run(1, 0), run(0, 0), run(1, 1, "failed"), run(0, 1),
                                                         run(1, 2), run(0, 2)]}
    assert recorded_repeats(record, "psnr_at_budget_db", 1, 0) == 1  # 0..K-1 all recorded: stops at the gap
    assert recorded_extent(record, "psnr_at_budget_db", 1, 0) == 3  # pair 2 counts: K = 3 fills the gap
    assert recorded_extent(None, "psnr_at_budget_db", 1, 0) == 0
    assert recorded_extent(record, "time_to_psnr_s", 1, 0) == 0
