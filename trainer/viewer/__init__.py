"""A web viewer of a model (viser), of a saved model (``ngptune view MODEL``, ``python -m
trainer.viewer``) or of a training run as it trains (``ngptune train --view``).

Modules: :mod:`.camera` (the browser's camera ↔ the trainer's cameras, frame sizes),
:mod:`.frames` (a frame rendered in bands with ``ngptune render``'s renderer), :mod:`.overlays`
(training cameras, scene box, occupied cells), :mod:`.server` (the viser server, progressive
frames per browser), :mod:`.live` (the viewer of a training run, served between steps),
:mod:`.flags` (``--view`` flags of training), :mod:`.cli`.
"""
