"""A study under way stays resumable by a trainer that added settings since it began, as long as
they sit at their defaults; any other difference is still refused, naming it."""

from __future__ import annotations

import copy

import pytest

optuna = pytest.importorskip("optuna")

from optuna.storages import JournalStorage  # noqa: E402
from optuna.storages.journal import JournalFileBackend  # noqa: E402

from ngptune.tuning.layout import StudyDir  # noqa: E402
from ngptune.tuning.storage import SweepError, open_study, settings_added_since  # noqa: E402
from ngptune.tuning.study import load_study  # noqa: E402
from tests.support.studies import write_study  # noqa: E402


def _without(definition: dict, block: str, key: str) -> dict:
    older = copy.deepcopy(definition)
    del older["config"][block][key]
    return older


@pytest.fixture
def spec(tmp_path, demo_scene):
    params = '[params."parallel.bucket_mib"]\ntype = "categorical"\nchoices = [1.0, 25.0]\n'
    return load_study(write_study(tmp_path / "tiny.toml", scene=demo_scene, params=params))


def test_only_settings_at_their_defaults_that_the_stored_definition_lacks_count_as_added(spec):
    current = spec.definition("scene", 1)
    assert settings_added_since(_without(current, "loss", "alpha_weight"), current) == ["loss.alpha_weight = 0.0"]
    assert settings_added_since(current, current) is None  # nothing differs
    assert settings_added_since(None, current) is None  # no stored definition to compare
    changed = copy.deepcopy(current)
    changed["config"]["loss"]["alpha_weight"] = 0.5  # a setting the study's trials ran with: not added
    assert settings_added_since(_without(current, "loss", "alpha_weight"), changed) is None
    other = _without(current, "loss", "alpha_weight")
    other["config"]["training"]["seed"] = 7  # added, and something else differs
    assert settings_added_since(other, current) is None
    assert settings_added_since(current, _without(current, "loss", "alpha_weight")) is None  # removed, not added


def _open(spec, tmp_path, definition: dict, fingerprint: str):
    storage = JournalStorage(JournalFileBackend(str(tmp_path / "journal.log")))
    return open_study(storage, "t", spec, fingerprint, {"storage": "journal"}, StudyDir(tmp_path / "out"),
                      spec.base_config(), False, definition=definition)


def test_a_study_made_before_a_setting_existed_resumes_and_says_so(spec, tmp_path):
    current = spec.definition("scene", 1)
    older = _without(current, "loss", "alpha_weight")
    made = _open(spec, tmp_path, older, "older")
    assert made.created and made.added_settings == []
    resumed = _open(spec, tmp_path, current, "current")
    assert not resumed.created and resumed.added_settings == ["loss.alpha_weight = 0.0"]
    assert len(resumed.study.trials) == 1  # the default trial enqueued when it was made, not again


def test_a_study_of_another_definition_is_still_refused(spec, tmp_path):
    current = spec.definition("scene", 1)
    _open(spec, tmp_path, current, "current")
    changed = copy.deepcopy(current)
    changed["config"]["training"]["seed"] = 7
    journal = (tmp_path / "journal.log").read_bytes()
    with pytest.raises(SweepError, match=r"was made from another definition: config\.training\.seed: 1337 → 7;"):
        _open(spec, tmp_path, changed, "changed")
    assert (tmp_path / "journal.log").read_bytes() == journal  # a refused sweep writes nothing into the study


def test_a_study_made_when_a_default_was_fixed_keeps_it_in_its_trials(spec, tmp_path):
    """optimizer.l2_reg was 1e-6 for every scene; now null (chosen from the scene). A study whose
    definition holds 1e-6 resumes and keeps it; one that set another value is refused, naming it."""
    from ngptune.tuning.specs import definition_fingerprint
    from ngptune.tuning.storage import former_defaults_kept

    current = spec.definition("scene", 1)
    assert current["config"]["optimizer"]["l2_reg"] is None
    older = copy.deepcopy(current)
    older["config"]["optimizer"]["l2_reg"] = 1e-6
    assert former_defaults_kept(older, current) == {"optimizer.l2_reg": 1e-6}
    assert former_defaults_kept(current, current) == {} and former_defaults_kept(None, current) == {}
    searched = copy.deepcopy(current)
    searched["params"].append({"name": "optimizer.l2_reg"})  # drawn by its trials: not kept
    assert former_defaults_kept(older, searched) == {}
    made = _open(spec, tmp_path, older, definition_fingerprint(older))
    assert made.created and made.kept_defaults == {}
    resumed = _open(spec, tmp_path, current, definition_fingerprint(current))
    assert not resumed.created and resumed.kept_defaults == {"optimizer.l2_reg": 1e-6}
    assert resumed.added_settings == [] and len(resumed.study.trials) == 1
    # the kept value does not hide another difference, and another stored value is no former default
    seeded = copy.deepcopy(current)
    seeded["config"]["training"]["seed"] = 7
    with pytest.raises(SweepError, match=r"another definition: config\.training\.seed: 1337 → 7;"):
        _open(spec, tmp_path, seeded, definition_fingerprint(seeded))
    other = copy.deepcopy(older)
    other["config"]["optimizer"]["l2_reg"] = 1e-5
    (tmp_path / "other").mkdir()
    _open(spec, tmp_path / "other", other, definition_fingerprint(other))
    with pytest.raises(SweepError, match=r"another definition: config\.optimizer\.l2_reg: 1e-05 → null"):
        _open(spec, tmp_path / "other", current, definition_fingerprint(current))
