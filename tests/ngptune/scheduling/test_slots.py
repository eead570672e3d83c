"""GPU slots on fake GPUs: disjoint sets, freed and reused, released when the owner dies, kept
while a leftover process lives, never shared between two schedulers of one node."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ngptune.scheduling.slots import FAKE_GPUS_ENV, SlotPool, slots_per_node, visible_gpus
from trainer.contract.errors import ConfigError


def test_fake_gpus_are_visible(monkeypatch):
    monkeypatch.setenv(FAKE_GPUS_ENV, "8")
    assert visible_gpus() == list(range(8))
    monkeypatch.setenv(FAKE_GPUS_ENV, "two")
    with pytest.raises(ConfigError, match="NGPTUNE_FAKE_GPUS: expected an integer >= 0, got 'two'"):
        visible_gpus()


_REAL_GPUS = """
import json, sys
from ngptune.scheduling.slots import visible_gpus
print(json.dumps({"gpus": visible_gpus(), "torch_imported": "torch" in sys.modules}))
"""


def test_real_gpus_are_counted_without_torch_in_the_driver(monkeypatch):
    import torch

    monkeypatch.delenv(FAKE_GPUS_ENV, raising=False)
    repo = Path(__file__).resolve().parents[3]
    done = subprocess.run([sys.executable, "-c", _REAL_GPUS], cwd=repo, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert json.loads(done.stdout) == {"gpus": list(range(count)), "torch_imported": False}


def test_slots_are_disjoint_freed_and_reused(tmp_path):
    pool = SlotPool(range(8), 2, claims_dir=tmp_path)
    assert pool.capacity == 4
    slots = [pool.claim() for _ in range(4)]
    assert sorted(g for s in slots for g in s.gpus) == list(range(8))
    assert pool.busy_gpus() == {g: 1 for g in range(8)}
    pool.release(slots[1])
    again = pool.claim()
    assert again.gpus == slots[1].gpus
    assert again.env({"PATH": "/bin", FAKE_GPUS_ENV: "8"}) == {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": again.visible_devices}


def test_bad_gpus_per_slot(tmp_path):
    with pytest.raises(ConfigError, match=r"--gpus-per-trial: 9 GPUs per job, but 8 GPUs are visible \(expected 1..8\)"):
        SlotPool(range(8), 9, claims_dir=tmp_path, flag="--gpus-per-trial")
    with pytest.raises(ConfigError, match="--gpus-per-trial: 0 GPUs per job"):
        SlotPool(range(8), 0, claims_dir=tmp_path, flag="--gpus-per-trial")


def test_a_dead_owner_releases_its_claim(tmp_path):
    pool = SlotPool(range(2), 2, claims_dir=tmp_path)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    pool.claim(owner_pid=dead.pid)  # e.g. a killed sweep worker
    other_worker = SlotPool(range(2), 2, claims_dir=tmp_path)
    assert other_worker.busy_gpus() == {0: 0, 1: 0}
    assert other_worker.claim().gpus == [0, 1]


def test_a_leftover_process_keeps_its_gpus_busy(tmp_path):
    pool = SlotPool(range(2), 1, claims_dir=tmp_path)
    slot = pool.claim()
    survivor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        pool.release(slot, leftover_pids=[survivor.pid])
        assert pool.busy_gpus()[slot.gpus[0]] == 1
        other = pool.claim()
        assert other.gpus != slot.gpus
    finally:
        survivor.kill()
        survivor.wait()
    assert pool.busy_gpus()[slot.gpus[0]] == 0


def test_shared_gpus_take_the_least_shared_first(tmp_path):
    pool = SlotPool(range(2), 1, per_gpu=2, claims_dir=tmp_path)
    assert pool.capacity == 4 == slots_per_node(2, 1, 2)
    got = [pool.claim().gpus[0] for _ in range(4)]
    assert got == [0, 1, 0, 1]


def test_capacity_blocks_until_a_slot_frees(tmp_path):
    pool = SlotPool([], 0, capacity=1, claims_dir=tmp_path)  # a CPU host: process slots only
    first = pool.claim()
    stop = threading.Event()
    got = []
    waiter = threading.Thread(target=lambda: got.append(pool.claim(stop=stop)))
    waiter.start()
    time.sleep(0.3)
    assert got == []
    pool.release(first)
    waiter.join(5)
    assert got and got[0].gpus == []


_WORKER = """
import json, sys, time
from pathlib import Path
from ngptune.scheduling.slots import SlotPool
pool = SlotPool(range(4), 1, claims_dir=Path(sys.argv[1]))
log = []
for _ in range(6):
    slot = pool.claim()
    start = time.time()
    time.sleep(0.05)
    log.append([slot.gpus[0], start, time.time()])
    pool.release(slot)
print(json.dumps(log))
"""


def test_two_schedulers_never_share_a_gpu(tmp_path):
    workers = [subprocess.Popen([sys.executable, "-c", _WORKER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
               for _ in range(3)]
    logs = [json.loads(w.communicate(timeout=60)[0]) for w in workers]
    spans = [(gpu, a, b) for log in logs for gpu, a, b in log]
    assert len(spans) == 18
    for i, (gpu, a, b) in enumerate(spans):
        for gpu2, a2, b2 in spans[i + 1:]:
            assert gpu != gpu2 or b <= a2 or b2 <= a, f"GPU {gpu} held twice at once"
