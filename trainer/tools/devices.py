"""``python -m trainer.tools.devices``: one JSON line ``{"cuda_devices": N}``, the CUDA devices
torch sees in this environment (``CUDA_VISIBLE_DEVICES`` applies; 0 without CUDA). The driver
decides the backend (:func:`trainer.contract.planned_backend`) and its default number of ranks
from it without loading torch itself. Counted as the launcher counts them
(:func:`trainer.parallel.cuda_count.cuda_device_count`: without importing torch where its build
and the CUDA driver answer, e.g. 0 at once for a CPU build of torch)."""

from __future__ import annotations

import json


def main() -> int:
    from trainer.parallel.cuda_count import cuda_device_count

    print(json.dumps({"cuda_devices": cuda_device_count()}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
