"""The summary ``ngptune profile`` prints at the end fits an 80-column terminal: every line under
80 columns, each quantity whole on one line, the knob of each fired diagnosis on its own lines."""

from __future__ import annotations

import pandas as pd

from ngptune.profile_command import summary_lines
from ngptune.profiling.diagnoses.checks import Check, Diagnosis

EVIDENCE = ("the all-reduce of the gradients takes 41.0 % of the step on the slowest rank while the link "
            "reaches 3.20 GB/s of the 12.0 GB/s measured by bench-comm")
KNOB = "parallel.bucket_cap_mb=100 (fewer, larger all-reduce buckets) or NCCL_ALGO=Ring with NCCL_PROTO=Simple"


def _summary() -> pd.DataFrame:
    return pd.DataFrame([
        {"rank": r, "steps": 300, "step_time_ms": 1234.56, "compute_ms": 1100.04, "wait_ms": 134.5,
         "phase_coverage": 0.987, "throughput_samples_per_s": 6_104_850.0, "rays_per_s": 77_612.0,
         "rank_throughput_samples_per_s": 3_052_425.0 + 1000 * r, "imbalance": 1.0213} for r in range(4)])


def test_the_profile_summary_fits_80_columns_with_quantities_whole():
    fired = Check("communication", "fired", 0.41, 0.2, EVIDENCE,
                  Diagnosis("communication", "high", 0.41, 0.2, EVIDENCE, KNOB))
    clear = Check("data_loading", "clear", 0.01, 0.1, "data takes 1.0 % of the step")
    lines = summary_lines(_summary(), [fired, clear], {"mean_psnr_db": 23.041, "split": "test", "images": [{}, {}]})
    assert all(len(line) <= 79 for line in lines), [line for line in lines if len(line) > 79]
    text = "\n".join(lines)
    assert lines[0] == "steps: 300 on 4 ranks; step time 1234.6 ms, after warm-up"  # (no steps_per_s column)
    assert lines[1].startswith("the parts of its 1234.6 ms: compute 1100.0 ms,")
    for whole in ("waiting for other ranks 134.5 ms,", "throughput (all ranks): 6.10 M samples/s, 77.6 k rays/s",
                  "rank 3 3.06 M samples/s;", "imbalance 1.02", "evaluation: PSNR 23.04 dB on 2 test views"):
        assert whole in text, whole
    diagnosis = next(i for i, line in enumerate(lines) if line.startswith("diagnosis: communication (high): "))
    tries = next(i for i, line in enumerate(lines) if line.startswith("  try: "))
    assert diagnosis < tries and all(line.startswith("  ") for line in lines[diagnosis + 1:])
    assert " ".join(line.strip() for line in lines[diagnosis:tries]).endswith(EVIDENCE)
    assert " ".join(line.strip() for line in lines[tries:]) == f"try: {KNOB}"
    assert all(line.startswith("    ") for line in lines[tries + 1:])  # the knob's own continuation


def test_checks_that_could_not_run_are_named_beside_none_fired():
    """A short profile leaves most checks without inputs: "none fired" says how many could run,
    and the next lines name the others."""
    from ngptune.profiling.diagnoses.checks import not_evaluated

    clear = Check("data_loading", "clear", 0.01, 0.1, "data takes 1.0 % of the step")
    missing = [not_evaluated("communication", 0.2, "one rank"), not_evaluated("collapse", 0.5, "no eval.json")]
    lines = summary_lines(_summary(), [clear, *missing], None)
    start = lines.index("diagnoses: none fired (1 of 3 checks could run)")
    assert " ".join(" ".join(lines[start + 1:]).split()) == (
        "not run, their inputs missing (report.html says which): communication, collapse")
    assert all(len(line) <= 79 for line in lines)
    everything = summary_lines(_summary(), [clear], None)
    assert everything[-1] == "diagnoses: none fired (1 of 1 checks could run)"


def test_the_trainers_opening_lines_are_read_whole_once_written(tmp_path):
    from ngptune.profile_command import opening_statement

    log = tmp_path / "trainer.log"
    assert opening_statement(log) is None  # not there yet
    log.write_text("warning: first\ntraining /data/fox on cpu,\n  1 rank (2 CPU threads per rank),")
    assert opening_statement(log) is None  # its last line not ended yet
    log.write_text("warning: first\ntraining /data/fox on cpu,\n  1 rank (2 CPU threads per rank),\n  up to 1 step\n")
    assert opening_statement(log) == "training /data/fox on cpu, 1 rank (2 CPU threads per rank), up to 1 step"
    with open(log, "a") as f:
        f.write("step 1  loss 0.1\n")
    assert opening_statement(log) == "training /data/fox on cpu, 1 rank (2 CPU threads per rank), up to 1 step"


def test_a_profile_inside_the_occupancy_warm_up_says_how_many_steps_judge_it():
    """Every step lay inside the occupancy warm-up: the console repeats, once for its checks, the
    sentence that names the --steps that would judge them (not only report.html)."""
    from ngptune.profiling.diagnoses.checks import not_evaluated
    from ngptune.profiling.diagnoses.inputs import steps_past_occupancy_warmup, warmup_sentence
    from trainer.contract import TrainConfig

    why = warmup_sentence(TrainConfig(), 30)
    checks = [not_evaluated("occupancy_update", 0.2, why), not_evaluated("wasted_samples", 0.5, why),
              not_evaluated("collapse", 0.5, "no eval.json")]
    lines = summary_lines(_summary(), checks, None)
    text = " ".join(" ".join(lines).split())
    assert text.count("the profile's steps are all inside the occupancy warm-up") == 1
    assert text.endswith(f"judging it needs --steps {steps_past_occupancy_warmup(TrainConfig())} or more"), text
    assert all(len(line) <= 79 for line in lines)
