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
    assert verdict.status == "not_confirmed" and verdict.recommend == "default" and not verdict.confirmed
    assert verdict.gain == pytest.approx(-0.05) and "the default is recommended" in verdict.sentence
    assert [(label, i) for label, i, _ in calls] == run_order(2)
    assert {seed for *_, seed in calls} == {2337, 2338}  # new seeds, shared by each pair


def test_a_best_that_holds_up_is_confirmed_with_its_evidence() -> None:
    study = _study(best_value=26.0, default_value=25.0)
    verdict = _confirm(study, {"best": [26.1, 25.9], "default": [25.0, 25.2]}, [])
    assert verdict.status == "confirmed" and verdict.recommend == "best"
    assert verdict.gain == pytest.approx(0.9) and verdict.se < 0.9
    assert "26 ± 0.14 dB vs default 25.1 ± 0.14 dB" in verdict.sentence


def test_a_gain_inside_the_noise_is_not_confirmed() -> None:
    verdict = decide("psnr_at_budget_db", "maximize", [26.0, 24.0], [25.0, 24.8])  # +0.1 dB, se 0.71
    assert verdict.status == "not_confirmed" and verdict.recommend == "default"


def test_minimised_objectives_and_failed_re_runs() -> None:
    assert decide("time_to_psnr_s", "minimize", [10.0, 11.0], [20.0, 21.0]).status == "confirmed"
    crashed = decide("time_to_psnr_s", "minimize", [10.0, None], [20.0, 21.0])
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


def test_the_default_as_best_needs_no_re_run() -> None:
    study = _study(best_value=25.0, default_value=26.0)
    calls: list = []
    verdict = confirm_study(study, best=study.trials[0], default=study.trials[0], repeats=2,
                            objective="psnr_at_budget_db", direction="maximize", unit="dB", base_seed=1,
                            launch=_fake_launch({}, calls))
    assert verdict.status == "best_is_default" and verdict.recommend == "default" and calls == []


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
