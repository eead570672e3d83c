"""ngptune — profile and autotune instant-NGP NeRF training (the driver side).

``ngptune`` imports only :mod:`trainer.contract` of the trainer and runs the trainer's programs as
processes (:mod:`ngptune.processes`); ``trainer`` never imports ``ngptune``.
"""

__version__ = "0.1.0"
