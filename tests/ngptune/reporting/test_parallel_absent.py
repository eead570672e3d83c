"""The parallel-coordinate figure names a parameter a trial does not have "not used", not None."""

from __future__ import annotations

import warnings

import optuna
from optuna.distributions import CategoricalDistribution, IntDistribution

from ngptune.reporting.study_plots import ABSENT_TEXT, absent_values_named, readable_axis_labels

CHOICES = {"parallel.mode": CategoricalDistribution(["data", "subgrid"]),
           "parallel.compression": CategoricalDistribution(["none", "bf16"]),
           "parallel.num_subgrids": IntDistribution(2, 4),
           "optimizer.ema_decay": CategoricalDistribution([None, 0.95])}


def _study() -> optuna.Study:
    """Data trials have a compression, subgrid trials a subgrid count; ema_decay's choices hold None."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(direction="maximize")
    for i, params in enumerate([{"parallel.mode": "data", "parallel.compression": "none", "optimizer.ema_decay": None},
                                {"parallel.mode": "data", "parallel.compression": "bf16", "optimizer.ema_decay": 0.95},
                                {"parallel.mode": "subgrid", "parallel.num_subgrids": 2, "optimizer.ema_decay": None},
                                {"parallel.mode": "subgrid", "parallel.num_subgrids": 4, "optimizer.ema_decay": 0.95}]):
        study.add_trial(optuna.trial.create_trial(params=params, distributions={k: CHOICES[k] for k in params},
                                                  value=float(i)))
    return study


def test_a_parameter_a_trial_lacks_reads_not_used_where_none_is_no_choice():
    study = _study()
    names = ["Objective Value", *CHOICES]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fig = optuna.visualization.plot_parallel_coordinate(study)
    ticks = list(fig.layout.xaxis.ticktext)
    axis = {name: ticks.index(next(t for t in ticks if name.startswith(t.removesuffix("...")))) for name in CHOICES}
    fig = readable_axis_labels(absent_values_named(fig, study, names), names)
    texts = {}
    for annotation in fig.layout.annotations:
        texts.setdefault(annotation.x, []).append(annotation.text)
    assert "none" in texts[axis["parallel.compression"]] and ABSENT_TEXT in texts[axis["parallel.compression"]]
    assert "None" not in texts[axis["parallel.compression"]] + texts[axis["parallel.num_subgrids"]]
    assert ABSENT_TEXT in texts[axis["parallel.num_subgrids"]]
    assert "None" in texts[axis["optimizer.ema_decay"]]  # a real choice there: kept
    hovered = {value for trace in fig.data if trace.customdata is not None for _, value in trace.customdata}
    assert ABSENT_TEXT in hovered
    assert "parallel.<br>num_subgrids" in fig.layout.xaxis.ticktext  # the labels made whole after
