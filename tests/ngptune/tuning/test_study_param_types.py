"""A gloo sweep refuses emulated-interconnect choices before any trial, and a numeric parameter type
for a config key that takes a string (or true/false) asks for a categorical parameter."""

from __future__ import annotations

import re

import pytest

from tests.support.studies import write_study
from trainer.contract.errors import ConfigError


# ------------------------------------------------ emulated links among a gloo sweep's choices


def test_gloo_sweep_refuses_emulated_interconnect_choices_before_any_trial(tmp_path, demo_scene):
    from ngptune.tuning.sweep import SweepOptions, run_sweep

    params = ('[params."distributed.emulate_interconnect"]\ntype = "categorical"\n'
              'choices = ["none", "pcie", "sockets"]\n')
    study = write_study(tmp_path / "emu.toml", scene=demo_scene, params=params)
    out = tmp_path / "out"
    with pytest.raises(ConfigError) as caught:
        run_sweep(SweepOptions(study_path=study, out_dir=out, nproc_per_node=2))
    message = str(caught.value)
    assert message.startswith(f"{study}: params.distributed.emulate_interconnect: choices pcie, sockets need NCCL")
    assert "gloo" in message
    assert not out.exists()  # no study, no storage, no trial folder


def test_gloo_sweep_accepts_an_emulation_parameter_of_none_only(tmp_path, demo_scene, monkeypatch):
    import ngptune.tuning.sweep as sweep

    params = '[params."distributed.emulate_interconnect"]\ntype = "categorical"\nchoices = ["none"]\n'
    study = write_study(tmp_path / "emu.toml", scene=demo_scene, params=params)
    reached = []
    monkeypatch.setattr(sweep, "_run", lambda *args: reached.append(args) or "ran")
    assert sweep.run_sweep(sweep.SweepOptions(study_path=study, out_dir=tmp_path / "out", nproc_per_node=2)) == "ran"
    assert len(reached) == 1


# --------------------------------------------------- a numeric parameter type for a string key


@pytest.mark.parametrize("kind", ["int", "float"])
def test_numeric_type_for_a_string_key_asks_for_categorical(tmp_path, kind):
    from ngptune.tuning.study import load_study

    params = f'[params."distributed.emulate_interconnect"]\ntype = "{kind}"\nlow = 0\nhigh = 2\n'
    study = write_study(tmp_path / "s.toml", params=params)
    with pytest.raises(ConfigError) as caught:
        load_study(study)
    noun = "integers" if kind == "int" else "numbers"
    assert str(caught.value) == (
        f"{study}: params.distributed.emulate_interconnect.type: distributed.emulate_interconnect takes a string "
        f'(one of none, nvlink, pcie, sockets), not {noun}; use type = "categorical" with a list of choices'
    )


@pytest.mark.parametrize(("key", "takes"), [("training.precision", "a string (one of "),
                                            ("distributed.master_addr", "a string, not"),
                                            ("parallel.overlap_comm", "true or false, not")])
def test_other_non_numeric_keys_given_an_int_type_are_named_the_same_way(tmp_path, key, takes):
    from ngptune.tuning.study import load_study

    study = write_study(tmp_path / "s.toml", params=f'[params."{key}"]\ntype = "int"\nlow = 0\nhigh = 1\n')
    with pytest.raises(ConfigError, match=re.escape(f"params.{key}.type: {key} takes {takes}")) as caught:
        load_study(study)
    assert 'type = "categorical"' in str(caught.value)
