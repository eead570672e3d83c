"""``python -m trainer.tools.devices``: one JSON line ``{"cuda_devices": N}``, the CUDA devices
torch sees in this environment (``CUDA_VISIBLE_DEVICES`` applies; 0 without CUDA). The driver
decides the backend (:func:`trainer.contract.planned_backend`) and its default number of ranks
from it without loading torch itself."""

from __future__ import annotations

import json


def main() -> int:
    from trainer.parallel.dist_env import visible_cuda_devices

    print(json.dumps({"cuda_devices": visible_cuda_devices()}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
