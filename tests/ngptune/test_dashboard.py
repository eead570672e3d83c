"""``ngptune dashboard STUDY_DIR``: a sweep's journal served by optuna-dashboard (its REST API
lists the study and its trials), Ctrl-C in one line, and the bad inputs: a folder without a
study, a port in use."""

from __future__ import annotations

import json
import socket
import urllib.request
from pathlib import Path

import pytest

from ngptune.cli import main
from tests.support.cli import first_statement
from tests.support.served import Served

pytest.importorskip("optuna_dashboard")


def _journal_study(folder: Path, name: str = "tiny", trials: int = 3) -> None:
    import optuna
    from optuna.storages.journal import JournalFileBackend

    storage = optuna.storages.JournalStorage(JournalFileBackend(str(folder / "study.journal")))
    study = optuna.create_study(study_name=name, storage=storage, direction="maximize")
    study.optimize(lambda trial: trial.suggest_float("x", 0.0, 1.0), n_trials=trials)


def test_dashboard_serves_the_study_of_a_sweep_folder_until_ctrl_c(tmp_path: Path) -> None:
    _journal_study(tmp_path)
    with Served(["ngptune", "dashboard", tmp_path]) as served:
        url = served.url()
        served.wait_for("Ctrl-C stops it$")
        statement, n = first_statement("\n".join(served.lines))
        assert statement == f"dashboard: {url} — {tmp_path} (tiny); Ctrl-C stops it"
        with urllib.request.urlopen(f"{url}/dashboard", timeout=60) as response:
            assert response.status == 200 and b"<html" in response.read().lower()
        with urllib.request.urlopen(f"{url}/api/studies", timeout=60) as response:
            studies = json.loads(response.read())["study_summaries"]
        assert [(s["study_name"], s["directions"]) for s in studies] == [("tiny", ["maximize"])]
        with urllib.request.urlopen(f"{url}/api/studies/{studies[0]['study_id']}", timeout=60) as response:
            assert len(json.loads(response.read())["trials"]) == 3
        assert served.interrupt() == 130
        assert served.lines[n:] == ["dashboard stopped"]


def test_a_folder_without_a_study_is_one_clear_error(tmp_path: Path, capsys) -> None:
    assert main(["dashboard", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {tmp_path}: no study.journal in this folder; give the sweep's --out folder, or "
                   "--storage URL for a study kept in a database"]
    assert main(["dashboard", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err.strip() == f"error: {tmp_path / 'missing'}: no such folder (expected a sweep's --out folder)"


def test_a_port_in_use_is_one_clear_error(tmp_path: Path, capsys) -> None:
    _journal_study(tmp_path, trials=1)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["dashboard", str(tmp_path), "--port", str(port)]) == 2
    assert capsys.readouterr().err.strip() == (f"error: --port {port}: already in use on 127.0.0.1; choose another "
                                               "port, or leave --port out for a free one")
