"""Suite-wide settings: one intra-op thread per test process.

The CI machine has 2 cores; with several processes (multi-rank tests) or any other load, OpenMP's
spinning threads slow small tensor ops by an order of magnitude. One thread keeps timings stable.
It also keeps results bit-reproducible: with two threads, CPU float reductions of one run can differ
from the next in the last bits, and the tests that compare two trainings exactly would fail. A test
that runs the trainer's command line in this process sets the rank's own thread count
(``trainer.cpu_threads``), so every test is put back to one thread afterwards.
"""

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def one_intra_op_thread():
    """Each test starts and ends with one intra-op thread."""
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(1)
