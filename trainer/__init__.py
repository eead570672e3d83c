"""trainer — the instant-NGP NeRF trainer that ngptune profiles and tunes.

Layering (bottom-up): ``contract`` (torch-free: config, run directory, status, metrics, command
lines, errors) → ``data`` / ``encoding`` / ``render`` → ``model`` → ``train`` → ``parallel`` →
``run`` / ``inference`` / ``tools`` and the front door ``python -m trainer``
(:mod:`trainer.launch_cli`). ``trainer`` never imports ``ngptune``; the driver imports only
:mod:`trainer.contract` and runs the trainer's programs as processes.
"""

__version__ = "0.1.0"
