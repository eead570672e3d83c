"""ngptune — profile and autotune instant-NGP NeRF training (the driver side).

``ngptune`` imports ``trainer``; ``trainer`` never imports ``ngptune``.
"""

__version__ = "0.1.0"
