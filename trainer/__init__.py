"""trainer — the instant-NGP NeRF trainer that ngptune profiles and tunes.

Layering (bottom-up): ``errors`` → ``data`` / ``encoding`` / ``render`` → ``model`` → ``train``.
``trainer`` never imports ``ngptune``; the contract with the driver is the run directory
(:mod:`trainer.rundir`) and the metrics schema (:mod:`trainer.schema`).
"""

__version__ = "0.1.0"
