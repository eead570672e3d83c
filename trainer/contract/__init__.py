"""The trainer's contract with its driver: everything ``ngptune`` may import of ``trainer``.

The driver starts the trainer as processes and reads what they leave; this package says how, and
holds nothing that needs torch (``import trainer.contract`` loads the standard library, ``json5``
and nothing else of the trainer's)::

    commandline  the entry points' flags, and trainer_argv / inference_argv / viewer_argv / tool_argv
                 that build every command line the driver starts (python -m trainer,
                 trainer.inference, trainer.viewer, trainer.tools.<tool>); worker_argv for the
                 launcher's ranks
    lifeline     children that stop when the process that started them dies
    signals      signals_held: a second Ctrl-C or SIGTERM noted, not raised, while a command writes its end
    rundir       RunDir: the run-directory layout, the only place its paths are built; atomic writes;
                 the complete checkpoints of a folder
    resumption   what a stopped run says on how to continue it (its newest model, the command line)
    runstatus    status.json keys and states; the one-line "error: " and the "warning: " protocol
    metrics      metrics.jsonl columns (unit in the name), PHASES, MetricsWriter / read_metrics
    evaluation   eval.json keys, read_evaluation, the collapse-to-the-background rule
    config       the typed config: twelve blocks of checked fields, I/O, overrides, resume diff
    world        the rules that tie a config to the world size (K >= W, ranks < W, ...)
    defaults     what a run takes when a flag is left out: the CPU preset, the run folder
    backend      the process-group backend rule, the emulated interconnects
    formats      the scene-format table (name, flag, loader, splits, detection)
    threads      the CPU thread rule (training.cpu_threads, else the cores other processes leave
                 free // ranks) and the words every first line names the count with
    usage        parse_command_line: a mistyped flag reported by its sub-command, with a close match
    textlines    fit_lines: a summary's parts into lines under 80 columns; counted: 1 step, 2 steps;
                 seconds_text (13.6 s, 42.1 ms) and clock_text (0:14) for durations
    errors       TrainerError → SceneError, ConfigError, SnapshotError, TrainingError, LaunchError

Inside the trainer these modules are its lowest layer; the driver imports this face only
(``from trainer.contract import ...``), never another module of ``trainer``. The face loads a
module when one of its names is first asked for (:data:`FACE` says which module holds which
names), so ``python -m trainer.contract.lifeline`` and the parsers of ``--help`` start quickly.
"""

from __future__ import annotations

import importlib
from typing import Any

FACE: dict[str, tuple[str, ...]] = {
    "commandline": (
        "BENCH_COMM_OPS", "BENCH_COMM_RESULT_FILE", "EXPORT_HELP", "LAUNCH_FLAGS", "RENDER_HELP", "TOOLS", "VIEW_HELP",
        "add_demo_scene_arguments", "add_export_arguments", "add_inspect_arguments", "add_render_arguments",
        "add_scene_format_arguments", "add_trainer_arguments", "add_view_arguments", "bench_comm_argv",
        "inference_argv", "integer_at_least", "nonnegative_int", "positive_int", "resume_flags", "scene_format_overrides", "tool_argv", "trainer_argv", "viewer_argv",
        "worker_argv",
    ),
    "lifeline": ("command_stopping_with_parent", "set_parent_death_signal"),
    "signals": ("PipeSafeStdout", "handlers_replaced", "main_to_its_end", "pipe_safe_stdout", "signals_held"),
    "rundir": ("RunDir", "atomic_write_text", "free_path", "latest_checkpoint", "prepare_output_file"),
    "resumption": ("newest_model", "resume_block", "resume_lines"),
    "runstatus": (
        "COMPLETED", "DERIVED_KEY", "DIVERGED", "FAILED", "INTERRUPTED", "PID_KEY", "PROGRESS_PREFIX", "REASON_KEY", "RUNNING",
        "RUN_DIR_KEY", "STATE_KEY", "SUMMARY_PREFIX", "TRAIN_START_KEY", "WARNING_PREFIX", "derived_settings_of",
        "error_or_last_line", "failed_fields", "fitted_warning", "is_completed", "is_diverged", "last_error_message", "plain_warning_format", "print_error",
        "process_fields", "progress_line", "read_progress_line", "result_line", "stale_pid", "state_of",
        "state_text", "summary_lines",
    ),
    "metrics": ("METRICS_COLUMNS", "PHASES", "Column", "MetricsError", "number_text", "phase_column", "quantity_text",
                "read_metrics", "si_count", "si_number", "unit_of"),
    "evaluation": (
        "COLLAPSE_CURES", "COLLAPSE_MARGIN_DB", "EVALUATION_KEYS", "EvaluationError", "collapse_cures",
        "collapse_gap_db", "collapse_message", "past_occupancy_warmup", "read_evaluation",
    ),
    "config": (
        "BLOCKS", "DERIVED_SETTINGS", "FORMER_FIXED_DEFAULTS", "DataConfig", "DirEncodingConfig", "DistributedConfig", "EncodingConfig", "FaultsConfig",
        "GpuCapability", "IGNORED_NGP_BLOCKS", "LossConfig", "MAX_TIMEOUT_S", "NGP_DESIRED_RESOLUTION",
        "NetworkConfig", "OptimizerConfig", "ParallelConfig", "ProfileConfig", "RGBNetworkConfig",
        "RUN_CONTROL_KEYS", "Rule", "TrainConfig", "TrainingConfig", "apply_overrides", "config_differences",
        "config_from_dict", "config_to_dict", "dump_config", "field_rule", "is_int", "is_number", "load_config",
        "parse_override", "parse_step_window", "show_value",
    ),
    "defaults": ("CPU_FRIENDLY_SAMPLES_PER_STEP", "CPU_PRESET", "cpu_config_warning", "default_config_path",
                 "default_run_dir", "run_device", "runs_on_cpu"),
    "world": ("check_boxes_per_rank", "check_ranks_per_node", "check_world_size"),
    "backend": ("EMULATED_INTERCONNECT_ENV", "check_run_emulation", "choose_backend", "interconnect_env", "planned_backend"),
    "formats": ("FORMAT_CHOICES", "SCENE_FORMATS", "SPLITS", "SceneFormat", "check_scene_found", "format_named",
                "held_scene"),
    "threads": ("LOAD_ENV", "CpuThreads", "HostLoad", "available_cores", "cpu_threads", "cpu_threads_per_rank",
                "describe_cpu_threads", "host_load"),
    "usage": ("chosen_parser", "close_flags", "parse_command_line"),
    "textlines": ("CONSOLE_PREFIX_ENV", "CONTINUATION", "LINE_WIDTH", "clock_text", "counted", "estimate_text",
                  "fit_lines", "joined", "line_width", "listed", "seconds_text"),
    "errors": ("ConfigError", "LaunchError", "SceneError", "SnapshotError", "TrainerError", "TrainingError"),
}
"""Module of the contract → the names the face gives of it."""

_MODULE_OF = {name: module for module, names in FACE.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'trainer.contract' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"trainer.contract.{module}"), name)
    globals()[name] = value  # asked once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
