"""Profiling of training runs (DESIGN.md §4): phase tables from the trainer's metrics, NVML
sampling, torch.profiler trace analysis, Nsight wrappers, the link's busbw and the eight bottleneck
diagnoses (:mod:`ngptune.profiling.diagnoses`). ``ngptune profile`` itself is :mod:`ngptune.profile_command`."""

from __future__ import annotations

import dataclasses

SOURCE_STATES = ("ok", "missing", "failed")


@dataclasses.dataclass(frozen=True)
class SourceStatus:
    """How one data source of a profile fared (an entry of ``sources.json``).

    Attributes:
        status: ``"ok"`` (collected), ``"missing"`` (not available or not requested) or
            ``"failed"`` (tried and broke).
        detail: what was collected, or why not, in one sentence.
    """

    status: str
    detail: str

    def __post_init__(self) -> None:
        if self.status not in SOURCE_STATES:
            raise ValueError(f"status: expected one of {', '.join(SOURCE_STATES)}, got {self.status!r}")

    def to_json(self) -> dict[str, str]:
        return {"status": self.status, "detail": self.detail}
