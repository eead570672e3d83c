"""The scene model: how space is represented and marched, chosen from the capture
(``training.scene_model``).

* ``box`` — instant-ngp's: the field covers the scene box (``aabb_scale``), the occupancy grid its
  cascades, rays are marched from the box entry to the box exit with steps growing with distance
  (``training.cone_angle``). A ray that leaves the box shows the training background: right for an
  object whose background was removed (alpha), wasteful for a capture with background, whose
  walls and far surroundings must then be painted as fog inside the box.
* ``unbounded`` — the box as in ``box``, and beyond it all of space contracted into a shell around
  the box (:mod:`trainer.render.contraction`): the field encodes contracted positions, the
  occupancy grid has one more level over the shell, and each ray goes on past the box exit in
  ``training.background_steps`` steps uniform in disparity (:mod:`trainer.render.march`), so the
  background is represented at its depth with a few samples per ray.

``auto`` picks by the capture's kind (:mod:`trainer.data.capture_kind`): ``box`` for an object
without background, ``unbounded`` for forward-facing and 360° captures; ``box`` in subgrid mode,
whose boxes partition the scene box (an explicit ``unbounded`` there is refused).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from trainer.contract.errors import ConfigError
from trainer.data.capture_kind import CaptureKind

__all__ = ["KIND_TEXT", "MODEL_OF_KIND", "SCENE_MODELS", "SceneModelChoice", "choose_scene_model", "field_box"]

SCENE_MODELS = ("box", "unbounded")
#: the scene model ``auto`` takes for each capture kind
MODEL_OF_KIND = {"object": "box", "forward-facing": "unbounded", "360": "unbounded"}
#: each capture kind in words
KIND_TEXT = {"object": "an object without background", "forward-facing": "a forward-facing capture",
             "360": "a 360° capture with background"}


@dataclasses.dataclass(frozen=True)
class SceneModelChoice:
    """The scene model a run uses and why.

    Attributes:
        model: one of :data:`SCENE_MODELS`.
        setting: ``training.scene_model`` as configured (``auto``, ``box`` or ``unbounded``).
        capture: the capture's kind, which ``auto`` decides from.
        why: how the setting led to the model (a few words).
    """

    model: str
    setting: str
    capture: CaptureKind
    why: str

    @property
    def unbounded(self) -> bool:
        return self.model == "unbounded"

    def line(self) -> str:
        """The trainer's opening line about it, e.g. ``scene model: unbounded (training.scene_model
        auto); capture: a 360° capture with background (no alpha; views spread to 52° ...)``."""
        return f"scene model: {self.model} ({self.why}); capture: {KIND_TEXT[self.capture.kind]} ({self.capture.reason})"


def choose_scene_model(setting: str, capture: CaptureKind, parallel_mode: str = "data") -> SceneModelChoice:
    """Resolve ``training.scene_model`` for a capture (module docstring).

    Args:
        setting: ``"auto"``, ``"box"`` or ``"unbounded"``.
        capture: the capture's kind (:func:`trainer.data.capture_kind.classify_capture`).
        parallel_mode: ``parallel.mode`` (``"data"`` or ``"subgrid"``).

    Raises:
        ConfigError: an unknown setting, or ``unbounded`` with ``parallel.mode`` subgrid (each
            names its key).
    """
    if setting == "auto":
        if parallel_mode == "subgrid":
            return SceneModelChoice("box", setting, capture, "training.scene_model auto; box in subgrid mode, whose "
                                    "boxes partition the scene box")
        return SceneModelChoice(MODEL_OF_KIND[capture.kind], setting, capture, "training.scene_model auto")
    if setting not in SCENE_MODELS:
        raise ConfigError(f"training.scene_model: expected one of auto, {', '.join(SCENE_MODELS)}, got {setting!r}")
    if setting == "unbounded" and parallel_mode == "subgrid":
        raise ConfigError("training.scene_model: 'unbounded' cannot train in parallel.mode 'subgrid' (its boxes "
                          "partition the scene box, the background shell lies outside it); use 'box' or 'auto'")
    return SceneModelChoice(setting, setting, capture, f"training.scene_model {setting}")


def field_box(aabb_scale: int, model: str) -> tuple[np.ndarray, int]:
    """The box the field's hash grid spans for a scene of this ``aabb_scale`` in this scene model
    and that box's side: the scene box (side ``aabb_scale``) for ``box``, the contracted cube
    (twice its side: where :class:`~trainer.render.contraction.SceneContraction` maps all of space)
    for ``unbounded``. Returns ``([2, 3] float64 min and max corner, side)``."""
    side = aabb_scale * (2 if model == "unbounded" else 1)
    return np.array([[0.5 - 0.5 * side] * 3, [0.5 + 0.5 * side] * 3], dtype=np.float64), side
