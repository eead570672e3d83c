"""trainer — the instant-NGP NeRF trainer that ngptune profiles and tunes.

Layering (bottom-up): ``errors`` → ``data`` / ``encoding`` / ``render`` → ``model`` → ``train``.
``trainer`` never imports ``ngptune``; the contract with the driver is the run directory
(:mod:`trainer.contract.rundir`), the outcome of a run (:mod:`trainer.contract.runstatus`), the metrics schema
(:mod:`trainer.contract.metrics`) and the command line ``python -m trainer`` (:mod:`trainer.launch_cli`).
"""

__version__ = "0.1.0"
