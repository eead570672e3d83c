"""Hostile text (newlines, ``$()``, backticks, quotes, markup) in every field that reaches a
generated shell or HTML file: refused where it is a name, quoted or escaped where it is a value;
sourcing ``best_env.sh`` runs nothing and the study report shows the text escaped."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from ngptune.tuning.layout import StudyDir
from ngptune.tuning.outputs import write_best_env
from ngptune.tuning.study import load_study
from tests.support.paths import REPO, repo_python_path
from trainer.contract.errors import ConfigError

HOSTILE = [
    "x\ntouch PWNED_NEWLINE\n#",
    "$(touch PWNED_DOLLAR)",
    "`touch PWNED_BACKTICK`",
    "a'; touch PWNED_QUOTE; echo '",
    'a"; touch PWNED_DQUOTE; echo "',
    "\r\ntouch PWNED_CR",
]


def _no_pwned(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("PWNED"))


@pytest.mark.parametrize("name", HOSTILE[:3])
def test_a_hostile_study_name_on_the_command_line_is_one_error_line(name, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "ngptune", "sweep", "--study-name", name, "--out", str(tmp_path / "s")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": repo_python_path()})
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [f"error: --study-name: expected a name of letters, digits, '.', '_' or '-', "
                                        f"got {name!r}"]  # one line: no usage, no raw newline
    assert not (tmp_path / "s").exists() and _no_pwned(tmp_path) == []


def test_an_error_naming_a_file_with_a_line_break_stays_one_line(tmp_path):
    study = tmp_path / "bad\nstudy.toml"
    study.write_text('[study]\nname = "a\\nb"\n')
    proc = subprocess.run([sys.executable, "-m", "ngptune", "sweep", "--study", str(study), "--out", str(tmp_path / "s")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": repo_python_path()})
    assert proc.returncode == 2
    shown = str(study).replace("\n", "\\n")
    assert proc.stderr.splitlines() == [f"error: {shown}: study.name: expected a name of letters, digits, '.', '_' or "
                                        f"'-', got 'a\\nb'"]


def test_a_hostile_study_name_in_a_study_file_names_the_key(tmp_path):
    study = tmp_path / "s.toml"
    study.write_text('[study]\nname = "x$(touch PWNED)"\n')
    with pytest.raises(ConfigError, match=r"s\.toml: study\.name: expected a name of letters, digits"):
        load_study(study)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash to source the file")
def test_sourcing_best_env_runs_nothing_and_gives_the_values_back(tmp_path):
    values = {f"NCCL_V{i}": text for i, text in enumerate(HOSTILE)}
    trial = SimpleNamespace(number=4, user_attrs={"nccl_env": values, "nccl_active": True})
    for study_name in HOSTILE:  # the sweep refuses these names; the writer is safe even so
        path = write_best_env(trial, study_name, StudyDir(tmp_path))
        names = " ".join(f'"${name}"' for name in values)
        proc = subprocess.run(["bash", "-c", f'set -eu; source "{path}"; printf "%s\\0" {names}'],
                              cwd=tmp_path, capture_output=True, timeout=30)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.decode().split("\0")[:-1] == list(values.values())
        assert _no_pwned(tmp_path) == []
        header = path.read_text().splitlines()[:3]  # two comment lines, then the first export
        assert "study " + json.dumps(study_name) in header[0] and header[1].startswith("#")
        assert header[2].startswith("export NCCL_V0=")


def test_best_env_says_why_nccl_was_inactive(tmp_path):
    """The reason follows the trials' processes, worded as the report and the sweep's heading word it."""
    from ngptune.reporting.nccl_text import nccl_inactive_reason

    trial = SimpleNamespace(number=2, user_attrs={"nccl_env": {}, "nccl_active": False})
    for nproc, reason in ((1, "one process per trial, so no collectives"), (2, "gloo backend"), (None, "gloo backend")):
        assert nccl_inactive_reason(nproc) == reason
        text = write_best_env(trial, "s", StudyDir(tmp_path), nproc).read_text()
        assert f"# NCCL was inactive in this sweep ({reason}): no NCCL variable was tuned." in text
    active = SimpleNamespace(number=2, user_attrs={"nccl_env": {"NCCL_ALGO": "Ring"}, "nccl_active": True})
    assert "inactive" not in write_best_env(active, "s", StudyDir(tmp_path), 2).read_text()


def test_best_env_refuses_a_variable_name_that_is_not_an_identifier(tmp_path):
    trial = SimpleNamespace(number=1, user_attrs={"nccl_env": {"NCCL_X=1; touch PWNED; Y": "1"}})
    with pytest.raises(ValueError, match="is not a shell variable name"):
        write_best_env(trial, "s", StudyDir(tmp_path))


def test_hostile_setting_values_keep_best_config_loadable(tmp_path, demo_scene):
    from tests.support.studies import write_study
    from trainer.contract.config import dump_config, load_config
    from ngptune.tuning.outputs import write_best_config

    value = "/tmp/c\n\"training\": {\"n_steps\": 1}, // \u2028 </script>'$(touch PWNED)'"
    spec = load_study(write_study(tmp_path / "h.toml", scene=demo_scene,
                                  settings={"data.cache_dir": value, "training.eval_max_images": 1}))
    config = tmp_path / "trial.config.json"
    config.write_text(dump_config(spec.base_config()) + "\n")
    trial = SimpleNamespace(number=1, user_attrs={"config_path": str(config), "is_default": False})
    path = write_best_config(trial, spec, StudyDir(tmp_path))
    lines = path.read_text(encoding="utf-8").splitlines()
    comments = [line for line in lines if line.startswith("//")]
    assert len(comments) == 4 and "\u2028" not in path.read_text(encoding="utf-8")  # one line each
    assert "training.eval_max_images" not in comments[3]  # left behind: not listed as a setting it holds
    cfg = load_config(path)
    assert cfg.data.cache_dir == value and cfg.training.n_steps != 1
    assert cfg.training.eval_max_images == load_config(spec.base_config_path).training.eval_max_images  # run control
    assert cfg.training.log_every == load_config(spec.base_config_path).training.log_every
    assert _no_pwned(tmp_path) == []
