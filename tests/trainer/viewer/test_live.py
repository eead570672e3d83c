"""The viewer of a training run (``--view``): an idle viewer never renders between steps, a
browser's request is served at the next step; ``python -m trainer --view`` serves the page while
it trains and stops it with the training; a port in use is one clear error before training."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import types
import urllib.request

import pytest

from tests.support.paths import REPO
from tests.support.scenes import TINY, tiny_config
from tests.support.served import Served
from trainer.contract.textlines import CONTINUATION, LINE_WIDTH, joined

pytest.importorskip("viser")


def test_an_idle_live_view_renders_nothing_between_steps(demo_scene, tmp_path):  # noqa: F811
    from trainer.data import load_scene
    from trainer.contract.rundir import RunDir
    from trainer.train.loop import Trainer
    from trainer.viewer.live import start_live_view

    run = RunDir(tmp_path / "run").create()
    trainer = Trainer(tiny_config(data__scene=str(demo_scene)), load_scene(demo_scene), run)
    lines: list[str] = []
    args = types.SimpleNamespace(view=True, view_host="127.0.0.1", view_port=0)
    assert start_live_view(args, trainer, run, lines.append, is_main=False) is None  # ranks > 0 serve nothing
    live = start_live_view(args, trainer, run, lines.append)
    served = []
    serve = live.viewer.serve
    live.viewer.serve = lambda budget_s: served.append(budget_s) or serve(budget_s)
    try:
        log, step = live.hooks(lambda record: None, lambda step, train_time_s: None)
        trainer.train(n_steps=6, on_log=log, on_step=step)
        assert served == []  # no browser: not one render between the 6 steps
        live.viewer.wake()  # what a browser's camera or a changed control does
        live.on_step(trainer.step, trainer.train_time_s)
        live.on_step(trainer.step, trainer.train_time_s)
        assert len(served) == 1  # served at the next step; nothing is due afterwards
    finally:
        live.close()
        trainer.close()
    first, last = lines[0].splitlines(), lines[-1].splitlines()
    assert joined(first) == f"viewer: {live.viewer.url} — the model as it trains (frames rendered between steps)"
    assert joined(last) == f"viewer: stopped with the training; ngptune view {run.root} shows the saved model"
    assert all(len(line) <= LINE_WIDTH for line in first + last if str(run.root) not in line), (first, last)


def _statement(lines: list[str], start: str) -> str:
    """The statement whose first line starts with ``start``, its continuation lines joined."""
    first = next(i for i, line in enumerate(lines) if line.startswith(start))
    rest = [line.strip() for line in lines[first + 1:]]
    count = next((i for i, line in enumerate(lines[first + 1:]) if not line.startswith((CONTINUATION, "rank 0:   "))),
                 len(rest))
    return " ".join([lines[first], *(r.removeprefix("rank 0:").strip() for r in rest[:count])])


def _tiny_sets() -> list[str]:
    return [arg for key, value in TINY.items() if key != "training.n_steps" for arg in ("--set", f"{key}={value}")]


@pytest.mark.slow
def test_train_view_serves_the_page_while_it_trains(demo_scene, tmp_path):  # noqa: F811
    out = tmp_path / "run"
    argv = ["trainer", "--scene", demo_scene, "--n-steps", 30, "--no-eval", "--quiet", "--view", "--out", out,
            *_tiny_sets()]
    with Served(argv) as served:
        url = served.wait_for(r"viewer: (http://\S+) — the model as it trains").group(1)
        with urllib.request.urlopen(url, timeout=60) as response:
            assert response.status == 200 and b"<html" in response.read().lower()
        assert served.finish(timeout=600) == 0
    assert _statement(served.lines, "viewer: stopped with the training;") == (
        f"viewer: stopped with the training; ngptune view {out} shows the saved model")
    assert json.loads((out / "status.json").read_text())["state"] == "completed"


def test_train_view_port_in_use_is_one_clear_error_before_training(demo_scene, tmp_path):  # noqa: F811
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "trainer", "--scene", str(demo_scene), "--n-steps", "5",
                               "--quiet", "--view", "--view-port", str(port), "--out", str(tmp_path / "run"),
                               *_tiny_sets()], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: --view-port {port}: already in use on 127.0.0.1; choose another port, or leave --view-port out "
        "for a free one")
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["state"] == "failed" and "step" not in status


def test_a_subgrid_run_of_several_ranks_is_refused_with_the_way_out(tmp_path):
    from trainer.contract.errors import ConfigError
    from trainer.contract.rundir import RunDir
    from trainer.viewer.live import start_live_view

    args = types.SimpleNamespace(view=True, view_host="127.0.0.1", view_port=0)
    trainer = types.SimpleNamespace(mode="subgrid", world_size=2)
    with pytest.raises(ConfigError, match=r"^--view: rank 0 of a subgrid run holds only its own boxes and cannot "
                                          r"render the scene; view the run's checkpoints with ngptune view RUN$"):
        start_live_view(args, trainer, RunDir(tmp_path), print)


@pytest.mark.slow
def test_rank_0_of_a_data_parallel_run_serves_the_page(demo_scene, tmp_path):  # noqa: F811
    out = tmp_path / "run"
    argv = ["trainer", "--nproc-per-node", 2, "--scene", demo_scene, "--n-steps", 60, "--no-eval", "--quiet",
            "--view", "--out", out, *_tiny_sets()]
    with Served(argv) as served:
        url = served.wait_for(r"rank 0: viewer: (http://\S+) — the model as it trains").group(1)
        with urllib.request.urlopen(url, timeout=60) as response:
            assert response.status == 200
        assert served.finish(timeout=600) == 0
    assert _statement(served.lines, "rank 0: viewer: stopped with the training;") == (
        f"rank 0: viewer: stopped with the training; ngptune view {out} shows the saved model")
    assert sum("viewer: http" in line for line in served.lines) == 1  # rank 1 serves nothing
    assert len(list(out.glob("events.out.tfevents.*"))) == 1  # rank 0's TensorBoard events
