"""Autotuning of the distributed trainer with Optuna (DESIGN.md §5): ``ngptune sweep``.

Layers, bottom-up:

* :mod:`ngptune.tuning.nccl`       the NCCL allow-list (values the tuner may set) and site variables.
* :mod:`ngptune.tuning.specs`      the parts of a study: parameters, objectives, budget, sampler, pruner.
* :mod:`ngptune.tuning.study`      study files (TOML): scene, base config, fixed settings, search space,
                                   objectives, budget, sampler, pruner; validated, errors name the
                                   file and the dotted key.
* :mod:`ngptune.tuning.samplers`   the Optuna sampler and pruner of a study.
* :mod:`ngptune.tuning.space`      sampling one trial's settings (conditional parameters, inactive
                                   NCCL parameters on gloo) and the untuned default.
* :mod:`ngptune.tuning.objectives` objective values and intermediate values from a run's metrics.
* :mod:`ngptune.tuning.trial`      one trial: a fresh ``python -m trainer --nproc-per-node N`` in its own
                                   session, polled, stopped with its whole process tree, classified.
* :mod:`ngptune.tuning.layout`     the study folder (storage, trial folders, best config, env file).
* :mod:`ngptune.tuning.outputs`    ``best_config.json`` and ``best_env.sh``.
* :mod:`ngptune.tuning.warmup`     the kernel-cache warm-up launch before trial 0 (seconds budgets on CUDA).
* :mod:`ngptune.tuning.storage`    the Optuna storage (journal file or RDB), study creation or resume,
                                   retries of dead workers' trials.
* :mod:`ngptune.tuning.sweep`      the Optuna study loop: trials, outputs, report.
* :mod:`ngptune.tuning.command`    ``ngptune sweep`` (argparse).

Optuna runs only in the sweep process; trials are separate process trees. This package's
``__init__`` imports nothing. A trial starts through the contract's parent-death wrapper (:func:`trainer.contract.command_stopping_with_parent`), so it dies with the sweep.
"""
