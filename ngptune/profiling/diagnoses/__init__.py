"""Bottleneck diagnoses of a training run (DESIGN.md §4): which of eight bottlenecks holds it back,
the numbers that show it, and the tuner knob to try. One module per diagnosis (the bottleneck's
name), listed in :data:`~ngptune.profiling.diagnoses.registry.DIAGNOSES`; the checks share
:mod:`~ngptune.profiling.diagnoses.checks` and :mod:`~ngptune.profiling.diagnoses.inputs`.

=====================  ==================================================  ==============================
bottleneck             value (unit) and evidence                           fires when
=====================  ==================================================  ==============================
compute_underused      mean GPU utilisation, % (NVML ``util_pct`` over     value < 80 % while data and
                       the active window); trace idle time (launch gaps)   comm shares are below theirs
data_loading           share of the step in the "data" phase (worst rank);  value > 0.10
                       a captured step: the ray kernels' share of the
                       traced replays (kernels.csv, category data)
hash_grid_contention   hash-grid backward / forward kernel time, ratio     value > 3
communication          exposed comm share of the step (least-waiting       value > 0.15
                       rank), achieved busbw vs the link
load_imbalance         max / mean per-rank compute time, ratio; waits in   value > 1.15
                       collectives
wasted_samples         occupied fraction of the occupancy grid at the      value > 0.30 at 32 samples per
                       run's end; samples per ray, the fraction's fall     ray or more (records past the
                                                                           occupancy warm-up)
occupancy_update       share of the step in the "occupancy_update" phase   value > 0.25 (intervals past
                       (worst rank)                                        the occupancy warm-up)
background_collapse    test PSNR minus the PSNR of painting every pixel    |value| < 0.1 dB past the
                       the background colour, dB (``eval.json``)          occupancy warm-up (always high)
=====================  ==================================================  ==============================

Every diagnosis that fires carries a severity from how far the value is past its threshold,
measured from the value of a perfect run (``ideal``: 0 for shares, 1 for ratios, 100 % for
utilisation): ``excess = (value − ideal) / (threshold − ideal)``; high from 2, medium from 1.5,
low below. A diagnosis whose inputs are missing is *not evaluated* (:class:`Check`), never guessed.

Inputs (:class:`ProfileInputs`) are pandas DataFrames. Phase times come from the trainer's phase
timers (``metrics.jsonl`` of every rank, :mod:`trainer.contract.metrics`): one row per rank, logged step and
phase with the mean ms per step of the interval ending at that step. Each rank's warm-up intervals
(one-off costs: lazy initialisation, the first occupancy update, allocator growth) are left out when
the rank has later ones, by the rule the summary table and the sweep objectives share
(:func:`ngptune.profiling.runs.drop_warmup`).

Per-rank compute time is the sum of ``ngptune.profiling.tables.COMPUTE_PHASES``, the rank's own work in which
it waits for no other rank (the data phase is judged on its own); time in
``ngptune.profiling.tables.WAIT_PHASES`` (collectives) is where a faster rank waits for the slowest.

During the occupancy warm-up (``training.occupancy_warmup_steps``) every cell of the grid is
updated every step and the grid is not yet carved, so the two occupancy checks judge only what
follows it, from the run's config (:attr:`ProfileInputs.config`); a run that never leaves the
warm-up leaves them not evaluated, naming the ``--steps`` that would. The same config takes out
of each diagnosis's suggestions (:class:`Suggestion`) the values the run already has.

The result of every check, fired or not, is a :class:`Check`; :func:`diagnoses_table` turns them
into the rows of ``diagnoses.csv``.
"""

from ngptune.profiling.diagnoses.assess import assess, diagnose, diagnoses_table
from ngptune.profiling.diagnoses.checks import SEVERITIES, Check, Diagnosis, DiagnosisError, Suggestion, knob_text
from ngptune.profiling.diagnoses.communication import LINK_UNDERUSED_FRACTION
from ngptune.profiling.diagnoses.inputs import (
    WARMUP_PHRASE,
    ProfileInputs,
    past_warmup_phases,
    rank_phase_means,
    steps_past_occupancy_warmup,
)
from ngptune.profiling.diagnoses.registry import BOTTLENECKS, DIAGNOSES, DiagnosisDef, diagnosis_measure_text
from ngptune.profiling.diagnoses.runs import (
    assess_run,
    config_of_run,
    diagnose_run,
    evaluation_of_run,
    inputs_from_run,
    occupancy_records,
)

__all__ = [
    "BOTTLENECKS", "DIAGNOSES", "LINK_UNDERUSED_FRACTION", "SEVERITIES", "WARMUP_PHRASE", "Check", "Diagnosis", "DiagnosisDef",
    "DiagnosisError", "ProfileInputs", "Suggestion", "assess", "assess_run", "config_of_run", "diagnose",
    "diagnose_run", "diagnoses_table", "diagnosis_measure_text", "evaluation_of_run", "inputs_from_run", "knob_text", "occupancy_records",
    "past_warmup_phases", "rank_phase_means", "steps_past_occupancy_warmup",
]
