"""The Optuna sampler and pruner of a study (from its ``[sampler]`` and ``[pruner]`` tables)."""

from __future__ import annotations

from ngptune.tuning.specs import PrunerSpec, SamplerSpec

__all__ = ["build_pruner", "build_sampler"]


def build_sampler(spec: SamplerSpec):
    """The Optuna sampler object: TPE, random or NSGA-II, seeded with ``spec.seed``."""
    import optuna

    if spec.type == "random":
        return optuna.samplers.RandomSampler(seed=spec.seed)
    if spec.type == "nsga2":
        extra = {} if spec.population_size is None else {"population_size": spec.population_size}
        return optuna.samplers.NSGAIISampler(seed=spec.seed, **extra)
    extra = {} if spec.n_startup_trials is None else {"n_startup_trials": spec.n_startup_trials}
    return optuna.samplers.TPESampler(seed=spec.seed, **extra)


def build_pruner(spec: PrunerSpec):
    """The Optuna pruner object: median, successive halving (asynchronous, Li et al. 2020),
    Hyperband (Li et al. 2018), or one that never prunes (``none``)."""
    import optuna

    if spec.type == "median":
        return optuna.pruners.MedianPruner(
            n_startup_trials=spec.n_startup_trials,
            n_warmup_steps=spec.n_warmup_steps,
            interval_steps=spec.interval_steps,
        )
    if spec.type == "successive_halving":
        return optuna.pruners.SuccessiveHalvingPruner(
            min_resource=spec.min_resource, reduction_factor=spec.reduction_factor,
            min_early_stopping_rate=spec.min_early_stopping_rate,
        )
    if spec.type == "hyperband":
        return optuna.pruners.HyperbandPruner(
            min_resource=spec.min_resource, max_resource=spec.max_resource, reduction_factor=spec.reduction_factor
        )
    return optuna.pruners.NopPruner()
