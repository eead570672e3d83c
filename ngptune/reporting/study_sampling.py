"""How a study's trials were drawn, from its user attributes: the sampler and its seed, the pruner,
the sweep workers that ran trials and how many at once, and whether the draws can be repeated
(:class:`SamplingFacts`; the attributes are written by :mod:`ngptune.tuning.provenance`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import optuna

__all__ = ["DEFINITION_ATTR", "PRUNER_ATTR", "SAMPLER_ATTR", "SETUP_ATTR", "WORKER_ATTR_PREFIX", "SamplingFacts",
           "sampling_facts", "spec_text", "worker_records"]

SAMPLER_ATTR = "sampler"  #: {"type", "seed", ...} of the study file's sampler
PRUNER_ATTR = "pruner"  #: {"type", ...} of the study file's pruner
WORKER_ATTR_PREFIX = "worker:"  #: + worker id: {"host", "pid", "concurrent_trials", "sampler_seed", ...}
SETUP_ATTR = "setup"  #: {"base_config" (path or None), "settings", "nccl_settings"} of the study file
#: What defines the study's trials (``StudySpec.definition``: base config, scene, space, objectives);
#: the report reads its ``params`` (each parameter's ``name`` and ``when`` conditions).
DEFINITION_ATTR = "definition"


def worker_records(user_attrs: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The worker records of a study's user attributes, by worker id (``host:pid:start``)."""
    return {key[len(WORKER_ATTR_PREFIX):]: value for key, value in user_attrs.items()
            if key.startswith(WORKER_ATTR_PREFIX) and isinstance(value, dict)}


def spec_text(record: Any) -> str:
    if not isinstance(record, dict) or "type" not in record:
        return "not recorded"
    if record["type"] == "none":  # no pruner: its options mean nothing
        return "none"
    extra = ", ".join(f"{k}={v}" for k, v in record.items() if k not in ("type", "seed") and v is not None)
    return f"{record['type']}" + (f" ({extra})" if extra else "")


@dataclasses.dataclass(frozen=True)
class SamplingFacts:
    """What decides which settings a study's trials drew.

    Attributes:
        sampler: the sampler's type and options ("not recorded" for a study without the attribute).
        seed: the study file's sampler seed, or None when not recorded.
        pruner: the pruner's type and options, or "not recorded".
        workers: per worker that ran trials (or, when no trial names its worker, per recorded
            worker): ``(worker id, concurrent trials or None when not recorded, sampler seed or None)``.
        reproducible: False when several workers ran trials or one ran several at once (Optuna
            seeds each process's sampler on its own and the trials interleave in the order they
            finish), so the same seed need not draw the same settings again.
        one_after_another: several workers, one trial at a time each, whose trials did not overlap
            in time: one study resumed by sweeps run one after another (each resumed sampler is
            seeded from the study's seed and the trials done before it).
        per_worker: ``(worker id, sampler with its seed, pruner)`` of each worker that ran
            trials and recorded its own, when they differ (a study file's sampler, seed or pruner
            edited between sweeps); else empty. ``sampler``, ``seed`` and ``pruner`` above are the
            latest such worker's.
    """

    sampler: str
    seed: int | None
    pruner: str
    workers: list[tuple[str, int | None, int | None]]
    reproducible: bool
    one_after_another: bool = False
    per_worker: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)

    def sentences(self) -> list[str]:
        """The report's lines: sampler and seed, pruner, workers, and the caveat when not reproducible."""
        seed = "not recorded" if self.seed is None else str(self.seed)
        lines = [f"Sampler: {self.sampler}, seed {seed}. Pruner: {self.pruner}."]
        described = []
        for worker, concurrent, worker_seed in self.workers:
            at_once = "concurrent trials not recorded" if concurrent is None else f"{concurrent} trial{'s' if concurrent != 1 else ''} at once"
            seeded = "" if worker_seed is None else f", sampler seed {worker_seed}"
            described.append(f"{worker} ({at_once}{seeded})")
        if described:
            lines.append(f"Workers: {len(self.workers)} sweep process{'es' if len(self.workers) != 1 else ''}: "
                         + "; ".join(described) + ".")
        else:
            lines.append("Workers: not recorded.")
        if self.per_worker:
            lines.append("The sampler or pruner changed between workers (the study file edited between sweeps): "
                         + "; ".join(f"{w} ran with sampler {sampler}, pruner {pruner}" for w, sampler, pruner in self.per_worker)
                         + ". A re-run of this study draws the same settings only with the same edits at the same "
                         "trials.")
        elif self.one_after_another:
            lines.append(f"The workers ran one after another (the study resumed {len(self.workers) - 1} "
                         f"time{'s' if len(self.workers) != 2 else ''}): each resumed sampler is seeded with the "
                         "study's seed offset by the trials done before it, so a re-run of this study draws the "
                         "same settings only if it stops at the same trials.")
        elif not self.reproducible:
            lines.append("Not reproducible: several workers or concurrent trials interleave the trials. Optuna seeds "
                         "each process's sampler on its own and each draw depends on the trials finished when it is "
                         "made, so re-running this study with the same seed need not draw the same settings.")
        return lines


def sampling_facts(study: optuna.Study) -> SamplingFacts:
    """The :class:`SamplingFacts` of a study from its user attributes (:data:`SAMPLER_ATTR`,
    :data:`PRUNER_ATTR`, the worker records) and its trials' ``worker`` attribute."""
    attrs = study.user_attrs
    records = worker_records(attrs)
    ran = []
    for trial in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        worker = trial.user_attrs.get("worker")
        if isinstance(worker, str) and worker not in ran:
            ran.append(worker)
    workers = []
    for worker in ran or list(records):
        record = records.get(worker, {})
        concurrent, seed = record.get("concurrent_trials"), record.get("sampler_seed")
        workers.append((worker, None if concurrent is None else int(concurrent), None if seed is None else int(seed)))
    own = [(w, records[w]) for w, _, _ in workers if isinstance(records.get(w, {}).get("sampler"), dict)]
    # the latest worker that ran trials with its own record: not one that only looked at the study
    sampler = own[-1][1]["sampler"] if own and ran else attrs.get(SAMPLER_ATTR)
    pruner = own[-1][1].get("pruner") if own and ran else attrs.get(PRUNER_ATTR)
    seed = sampler.get("seed") if isinstance(sampler, dict) else None
    parallel = len(workers) > 1 or any((c or 1) > 1 for _, c, _ in workers)
    in_turn = (len(workers) > 1 and all(c == 1 for _, c, _ in workers)
               and _one_after_another(study, [w for w, _, _ in workers]))
    per_worker = [(w, f"{spec_text(r['sampler'])}, seed {r['sampler'].get('seed')}", spec_text(r.get("pruner")))
                  for w, r in own] if ran else []
    if len({(sampler_, pruner_) for _, sampler_, pruner_ in per_worker}) < 2:
        per_worker = []
    return SamplingFacts(sampler=spec_text(sampler), seed=None if seed is None else int(seed),
                         pruner=spec_text(pruner), workers=workers, reproducible=not parallel,
                         one_after_another=in_turn, per_worker=per_worker)


def _one_after_another(study: optuna.Study, workers: list[str]) -> bool:
    """Whether each worker's trials (start to end) lie after every trial of the workers before it
    (False when a trial of theirs has no start or end time)."""
    spans = []
    for worker in workers:
        trials = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("worker") == worker]
        if not trials or any(t.datetime_start is None or t.datetime_complete is None for t in trials):
            return False
        spans.append((min(t.datetime_start for t in trials), max(t.datetime_complete for t in trials)))
    spans.sort()
    return all(later[0] >= earlier[1] for earlier, later in zip(spans, spans[1:]))
