"""The trainer's contract with its driver: everything ``ngptune`` may import of ``trainer``.

The driver starts the trainer as processes and reads what they leave; this package says how, and
holds nothing that needs torch (``import trainer.contract`` loads the standard library, ``json5``
and nothing else of the trainer's)::

    commandline  the entry points' flags, and trainer_argv / inference_argv / tool_argv that build
                 every command line the driver starts (python -m trainer, trainer.inference,
                 trainer.tools.<tool>); worker_argv for the launcher's ranks
    lifeline     children that stop when the process that started them dies
    rundir       RunDir: the run-directory layout, the only place its paths are built; atomic writes
    runstatus    status.json keys and states; the one-line "error: " / "warning: " protocol
    metrics      metrics.jsonl columns (unit in the name), PHASES, MetricsWriter / read_metrics
    evaluation   eval.json keys, read_evaluation, the collapse-to-the-background rule
    config       the typed config: twelve blocks of checked fields, I/O, overrides, resume diff
    world        the rules that tie a config to the world size (K >= W, ranks < W, ...)
    defaults     what a run takes when a flag is left out: the CPU preset, the run folder
    backend      the process-group backend rule, the emulated interconnects
    formats      the scene-format table (name, flag, loader, splits, detection)
    errors       TrainerError → SceneError, ConfigError, SnapshotError, TrainingError, LaunchError

Inside the trainer these modules are its lowest layer; the driver imports this face only
(``from trainer.contract import ...``), never another module of ``trainer``.
"""

from trainer.contract import config
from trainer.contract.backend import EMULATED_INTERCONNECT_ENV, check_run_emulation, choose_backend, interconnect_env, planned_backend
from trainer.contract.commandline import (
    BENCH_COMM_OPS,
    BENCH_COMM_RESULT_FILE,
    EXPORT_HELP,
    LAUNCH_FLAGS,
    RENDER_HELP,
    TOOLS,
    add_demo_scene_arguments,
    add_export_arguments,
    add_inspect_arguments,
    add_render_arguments,
    add_scene_format_arguments,
    add_trainer_arguments,
    bench_comm_argv,
    inference_argv,
    positive_int,
    scene_format_overrides,
    tool_argv,
    trainer_argv,
    worker_argv,
)
from trainer.contract.config import *  # noqa: F403  (the config package's __all__)
from trainer.contract.defaults import CPU_PRESET, cpu_config_warning, default_config_path, default_run_dir, runs_on_cpu
from trainer.contract.errors import ConfigError, LaunchError, SceneError, SnapshotError, TrainerError, TrainingError
from trainer.contract.evaluation import (
    COLLAPSE_CURES,
    COLLAPSE_MARGIN_DB,
    EVALUATION_KEYS,
    EvaluationError,
    collapse_gap_db,
    collapse_message,
    past_occupancy_warmup,
    read_evaluation,
)
from trainer.contract.formats import FORMAT_CHOICES, SCENE_FORMATS, SPLITS, SceneFormat, format_named
from trainer.contract.lifeline import command_stopping_with_parent, set_parent_death_signal
from trainer.contract.metrics import METRICS_COLUMNS, PHASES, Column, MetricsError, phase_column, read_metrics
from trainer.contract.rundir import RunDir, atomic_write_text, prepare_output_file
from trainer.contract.runstatus import (
    COMPLETED,
    FAILED,
    INTERRUPTED,
    REASON_KEY,
    RUN_DIR_KEY,
    RUNNING,
    STATE_KEY,
    TRAIN_START_KEY,
    WARNING_PREFIX,
    error_or_last_line,
    is_completed,
    last_error_message,
    plain_warning_format,
    print_error,
    state_of,
)
from trainer.contract.world import check_boxes_per_rank, check_world_size

__all__ = [
    # command lines
    "BENCH_COMM_OPS", "BENCH_COMM_RESULT_FILE", "EXPORT_HELP", "LAUNCH_FLAGS", "RENDER_HELP", "TOOLS",
    "add_demo_scene_arguments", "add_export_arguments", "add_inspect_arguments",
    "add_render_arguments", "add_scene_format_arguments", "add_trainer_arguments", "bench_comm_argv",
    "inference_argv", "positive_int", "scene_format_overrides", "tool_argv", "trainer_argv", "worker_argv",
    "command_stopping_with_parent", "set_parent_death_signal",
    # run directory, status, metrics, evaluation
    "RunDir", "atomic_write_text", "prepare_output_file",
    "COMPLETED", "FAILED", "INTERRUPTED", "REASON_KEY", "RUN_DIR_KEY", "RUNNING", "STATE_KEY", "TRAIN_START_KEY",
    "WARNING_PREFIX", "error_or_last_line", "is_completed", "last_error_message", "plain_warning_format",
    "print_error", "state_of",
    "METRICS_COLUMNS", "PHASES", "Column", "MetricsError", "phase_column", "read_metrics",
    "COLLAPSE_CURES", "COLLAPSE_MARGIN_DB", "EVALUATION_KEYS", "EvaluationError", "collapse_gap_db",
    "collapse_message", "past_occupancy_warmup", "read_evaluation",
    # config and its rules
    "config", *config.__all__,
    "check_boxes_per_rank", "check_world_size",
    "CPU_PRESET", "cpu_config_warning", "default_config_path", "default_run_dir", "runs_on_cpu",
    "EMULATED_INTERCONNECT_ENV", "check_run_emulation", "choose_backend", "interconnect_env", "planned_backend",
    "FORMAT_CHOICES", "SCENE_FORMATS", "SPLITS", "SceneFormat", "format_named",
    # errors
    "ConfigError", "LaunchError", "SceneError", "SnapshotError", "TrainerError", "TrainingError",
]
