"""The trainer's command lines (trainer.contract.commandline): what the driver builds is what the
trainer's parser reads, and the flags' choices come from the tables they name."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from trainer.contract import (
    EMULATED_INTERCONNECT_ENV,
    FORMAT_CHOICES,
    LAUNCH_FLAGS,
    add_trainer_arguments,
    field_rule,
    resume_flags,
    tool_argv,
    trainer_argv,
    worker_argv,
)


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_trainer_arguments(parser)
    assert argv[:3] == [sys.executable, "-m", "trainer"]
    return parser.parse_args(argv[3:])


def test_every_keyword_arrives_as_its_flag():
    argv = trainer_argv(config="c.json", scene="s", out="run", nproc_per_node=2, n_steps=30, time_budget_s=1.5,
                        evaluate=False, eval_max_images=3, save_snapshot="a.pt", warm_start="b.pt", resume="c.pt",
                        trace_steps=(5, 10), emulate_interconnect="pcie", quiet=True,
                        overrides={"training.precision": "bf16", "data.scene": "123", "training.log_every": 1},
                        extra=["--device", "cpu"])
    args = _parse(argv)
    assert (args.config, args.scene, args.out) == (Path("c.json"), Path("s"), Path("run"))
    assert (args.nproc_per_node, args.n_steps, args.time_budget_s) == (2, 30, 1.5)
    assert (args.no_eval, args.eval_max_images, args.quiet, args.device) == (True, 3, True, "cpu")
    assert (args.save_snapshot, args.warm_start, args.resume) == (Path("a.pt"), Path("b.pt"), Path("c.pt"))
    assert (args.trace_steps, args.emulate_interconnect) == ("5:10", "pcie")
    from trainer.contract import parse_override

    # a mapping's values come back as they were (a string that reads as a number stays a string)
    assert dict(parse_override(item) for item in args.overrides) == {
        "training.precision": "bf16", "data.scene": "123", "training.log_every": 1}


def test_defaults_add_no_flag_and_texts_pass_as_given():
    assert trainer_argv() == [sys.executable, "-m", "trainer"]
    assert trainer_argv(overrides=["training.seed=3"])[3:] == ["--set", "training.seed=3"]


def test_resume_flags_are_the_run_flags_config_json_does_not_keep():
    """The command that continues a stopped run repeats --no-eval and --keep-checkpoints (in either
    spelling) and nothing that the run's config.json already holds."""
    argv = trainer_argv(scene="s", n_steps=5, evaluate=False, quiet=True, overrides={"training.batch_size": 4096},
                        extra=["--keep-checkpoints=2", "--snapshot-every", "3"])
    assert resume_flags(argv[3:]) == ["--no-eval", "--keep-checkpoints", "2"]
    assert resume_flags(trainer_argv(scene="s", n_steps=5, time_budget_s=6.0)[3:]) == []
    assert resume_flags(["--keep-checkpoints", " 3"]) == ["--keep-checkpoints", "3"]  # as the flag's int reads it
    parsed = _parse([sys.executable, "-m", "trainer", *resume_flags(argv[3:])])
    assert parsed.no_eval and parsed.keep_checkpoints == 2


def test_the_resume_command_can_be_pasted_into_a_shell_whatever_the_folder_name():
    import shlex

    from trainer.contract import RunDir, resume_lines

    run = RunDir(Path("runs/a run's folder"))
    snapshot = run.root / "snapshots" / "step_0000060.pt"
    said = resume_lines(run, snapshot, flags=["--no-eval"])[1]
    assert said.startswith("continue with: ngptune train --config ")
    assert shlex.split(said.removeprefix("continue with: ")) == [
        "ngptune", "train", "--config", str(run.config_path), "--resume", str(snapshot), "--out", str(run.root),
        "--no-eval"]


def test_worker_argv_leaves_out_the_launch_flags_in_both_spellings():
    argv = ["--nproc-per-node", "2", "--n-steps", "5", "--nnodes=1", "--max-restarts", "1", "--out", "r"]
    assert worker_argv(argv) == ["--n-steps", "5", "--out", "r"]
    assert all(flag.startswith("--") for flag in LAUNCH_FLAGS)


def test_flag_choices_are_the_tables():
    parser = argparse.ArgumentParser()
    add_trainer_arguments(parser)
    choices = {a.dest: a.choices for a in parser._actions if a.choices}
    assert tuple(choices["scene_format"]) == FORMAT_CHOICES
    assert tuple(choices["precision"]) == field_rule("training.precision").choices
    assert tuple(choices["emulate_interconnect"]) == tuple(EMULATED_INTERCONNECT_ENV)
    assert field_rule("data.format").choices == ("auto", *FORMAT_CHOICES)
    assert field_rule("distributed.emulate_interconnect").choices == tuple(EMULATED_INTERCONNECT_ENV)


def test_tool_argv_names_only_the_tools():
    assert tool_argv("devices") == [sys.executable, "-m", "trainer.tools.devices"]
    with pytest.raises(KeyError, match="no trainer tool 'nope'"):
        tool_argv("nope")
    import trainer.tools

    tools = {p.stem for p in Path(trainer.tools.__file__).parent.glob("*.py") if p.stem != "__init__"}
    from trainer.contract import TOOLS

    assert tools == set(TOOLS)
