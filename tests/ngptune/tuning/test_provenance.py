"""The sampler and pruner a study recorded against a study file's: what a resumed sweep notes."""

from __future__ import annotations

from types import SimpleNamespace

import optuna

from ngptune.reporting.study_sampling import sampling_facts
from ngptune.tuning.provenance import record_worker, sampling_changes
from ngptune.tuning.specs import PrunerSpec, SamplerSpec


def _spec(sampler: SamplerSpec, pruner: PrunerSpec) -> SimpleNamespace:
    return SimpleNamespace(sampler=sampler, pruner=pruner, scene="demo", base_config_path=None, settings={},
                           nccl_settings={})


def test_changes_name_the_sampler_the_pruner_and_the_seed():
    study = optuna.create_study(study_name="p", direction="maximize")
    first = _spec(SamplerSpec(type="tpe", seed=42, n_startup_trials=5), PrunerSpec(type="median", n_startup_trials=3))
    assert sampling_changes(study, first) == []  # nothing recorded yet
    record_worker(study, first, "hostA:1:1", concurrent_trials=1, sampler_seed=42)
    assert sampling_changes(study, first) == []  # the same file again (tuples read back as lists compare equal)
    reseeded = _spec(SamplerSpec(type="tpe", seed=7, n_startup_trials=5), first.pruner)
    assert sampling_changes(study, reseeded) == ["sampler seed 42 → 7"]
    assert sampling_changes(study, _spec(first.sampler, PrunerSpec(type="none"))) == ["pruner median → none"]
    assert sampling_changes(study, _spec(SamplerSpec(type="random", seed=5), PrunerSpec(type="median", n_startup_trials=5))) == [
        "sampler tpe → random", "sampler seed 42 → 5", "pruner median: n_startup_trials 3 → 5"]
    # a stored record that differs only by an option unset on both sides (an older record without
    # the key): nothing the pruner does changed
    older = {k: v for k, v in study.user_attrs["pruner"].items() if v is not None}
    study.set_user_attr("pruner", older)
    assert sampling_changes(study, first) == []


def test_the_report_names_each_workers_sampler_only_when_they_differ():
    study = optuna.create_study(study_name="p", direction="maximize")
    first = _spec(SamplerSpec(type="random", seed=3), PrunerSpec(type="none"))
    second = _spec(SamplerSpec(type="tpe", seed=3, n_startup_trials=1), PrunerSpec(type="none"))
    for worker, spec in (("hostA:1:1", first), ("hostA:2:2", first)):
        record_worker(study, spec, worker, concurrent_trials=1, sampler_seed=3)
        study.enqueue_trial({})
        trial = study.ask()
        trial.set_user_attr("worker", worker)
        study.tell(trial, 1.0)
    assert sampling_facts(study).per_worker == []
    record_worker(study, second, "hostA:3:3", concurrent_trials=1, sampler_seed=4)
    trial = study.ask()
    trial.set_user_attr("worker", "hostA:3:3")
    study.tell(trial, 2.0)
    facts = sampling_facts(study)
    assert facts.per_worker == [("hostA:1:1", "random, seed 3", "none"), ("hostA:2:2", "random, seed 3", "none"),
                                ("hostA:3:3", "tpe (n_startup_trials=1), seed 3", "none")]
    assert facts.sampler == "tpe (n_startup_trials=1)"  # the study-wide attribute: the latest worker's
    assert ("The sampler or pruner changed between workers (the study file edited between sweeps): hostA:1:1 ran "
            "with sampler random, seed 3, pruner none;") in " ".join(facts.sentences())
    # a worker that ran no trial does not change what the report says the trials ran with
    record_worker(study, _spec(SamplerSpec(type="random", seed=9), PrunerSpec(type="none")), "hostA:4:4",
                  concurrent_trials=1, sampler_seed=9)
    assert sampling_facts(study).sampler == "tpe (n_startup_trials=1)" and sampling_facts(study).seed == 3


def test_workers_recorded_before_their_own_sampler_get_the_one_they_ran_with():
    """Older worker records hold no sampler: the study-wide one they ran with is filled in before
    a worker with another replaces it, so the report can tell them apart."""
    study = optuna.create_study(study_name="p", direction="maximize")
    first = _spec(SamplerSpec(type="random", seed=3), PrunerSpec(type="none"))
    record_worker(study, first, "hostA:1:1", concurrent_trials=1, sampler_seed=3)
    bare = {k: v for k, v in study.user_attrs["worker:hostA:1:1"].items() if k not in ("sampler", "pruner")}
    study.set_user_attr("worker:hostA:1:1", bare)  # as a study from before per-worker records holds it
    trial = study.ask()
    trial.set_user_attr("worker", "hostA:1:1")
    study.tell(trial, 1.0)
    record_worker(study, _spec(SamplerSpec(type="tpe", seed=3), first.pruner), "hostA:2:2", concurrent_trials=1,
                  sampler_seed=4)
    assert study.user_attrs["worker:hostA:1:1"]["sampler"]["type"] == "random"
    trial = study.ask()
    trial.set_user_attr("worker", "hostA:2:2")
    study.tell(trial, 2.0)
    assert [s for _, s, _ in sampling_facts(study).per_worker] == ["random, seed 3", "tpe, seed 3"]
