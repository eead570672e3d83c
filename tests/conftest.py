"""Suite-wide settings: one intra-op thread per test process.

The CI machine has 2 cores; with several processes (multi-rank tests) or any other load, OpenMP's
spinning threads slow small tensor ops by an order of magnitude. One thread keeps timings stable.
"""

import torch

torch.set_num_threads(1)
