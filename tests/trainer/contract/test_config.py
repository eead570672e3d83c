"""Tests of the typed trainer config (trainer/contract/config/): defaults, instant-ngp forms, errors,
overrides and the dict/JSON round trip."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from tests.support.paths import REPO
from trainer.contract.config import (
    BLOCKS,
    DirEncodingConfig,
    DistributedConfig,
    EncodingConfig,
    GpuCapability,
    LossConfig,
    OptimizerConfig,
    TrainConfig,
    TrainingConfig,
    apply_overrides,
    config_from_dict,
    config_to_dict,
    dump_config,
    load_config,
    parse_override,
)
from trainer.contract.errors import ConfigError
from trainer.encoding.hashgrid import level_resolutions
from trainer.train.build import hash_grid_config


# instant-ngp's NeRF config as users paste it from articles: comments, trailing commas, the
# nested tiny-cuda-nn optimizer, the Composite direction encoding and the instant-ngp-only
# distortion_map / envmap blocks.
PASTED_NGP_CONFIG = """\
// instant-ngp configs/nerf/base.json (paper era)
{
  "loss": {"otype": "Huber"},
  "optimizer": {
    "otype": "Ema",
    "decay": 0.95,
    "nested": {
      "otype": "ExponentialDecay",
      "decay_start": 20000,
      "decay_interval": 10000,
      "decay_base": 0.33,
      "nested": {
        "otype": "Adam",
        "learning_rate": 1e-2,
        "beta1": 0.9,
        "beta2": 0.99,
        "epsilon": 1e-15,
        "l2_reg": 1e-6,   // MLP weights only
      },
    },
  },
  "encoding": {
    "otype": "HashGrid",
    "n_levels": 16,
    "n_features_per_level": 2,
    "log2_hashmap_size": 19,
    "base_resolution": 16,
  },
  "network": {"otype": "FullyFusedMLP", "activation": "ReLU", "output_activation": "None",
              "n_neurons": 64, "n_hidden_layers": 1},
  "dir_encoding": {
    "otype": "Composite",
    "nested": [
      {"n_dims_to_encode": 3, "otype": "SphericalHarmonics", "degree": 4},
      {"otype": "Identity"},
    ],
  },
  "rgb_network": {"otype": "FullyFusedMLP", "activation": "ReLU", "output_activation": "None",
                  "n_neurons": 64, "n_hidden_layers": 2},
  "distortion_map": {"resolution": [32, 32], "optimizer": {"otype": "Adam"}},
  "envmap": {"loss": {"otype": "RelativeL2"}},
}
"""


def _error(data: object) -> str:
    with pytest.raises(ConfigError) as info:
        config_from_dict(data)  # type: ignore[arg-type]
    return str(info.value)


# ---------------------------------------------------------------------------------------------
# Defaults and the shipped presets.
# ---------------------------------------------------------------------------------------------


def test_defaults_are_instant_ngp_values() -> None:
    """instant-ngp's values, except the loss (L2, measured better on lego_400; see LossConfig) and
    the hash grid's F and T, which the scene model chooses (4 and 2^18 with the box, instant-ngp's
    2 and 2^19 with the unbounded model; see EncodingConfig)."""
    cfg = TrainConfig()
    enc = cfg.encoding
    assert (enc.otype, enc.n_levels, enc.n_features_per_level) == ("HashGrid", 16, None)
    assert (enc.log2_hashmap_size, enc.base_resolution) == (None, 16)
    assert (enc.resolved_features_per_level(unbounded=False), enc.resolved_log2_hashmap_size(unbounded=False)) == (4, 18)
    assert (enc.resolved_features_per_level(unbounded=True), enc.resolved_log2_hashmap_size(unbounded=True)) == (2, 19)
    assert enc.per_level_scale is None and enc.max_resolution is None
    assert (enc.backend, enc.table_dtype) == ("auto", "float32")
    assert (cfg.network.n_neurons, cfg.network.n_hidden_layers) == (64, 1)
    assert (cfg.rgb_network.n_neurons, cfg.rgb_network.n_hidden_layers) == (64, 2)
    assert cfg.dir_encoding == DirEncodingConfig("SphericalHarmonics", 4)
    assert cfg.optimizer == OptimizerConfig(1e-2, 0.9, 0.99, 1e-15, None, 8000, 4000, 0.33, None, False)
    # the MLP weights' L2 regularisation: instant-ngp's 1e-6 with the unbounded model, none with the box
    opt = cfg.optimizer
    assert (opt.resolved_l2_reg(unbounded=True), opt.resolved_l2_reg(unbounded=False)) == (1e-6, 0.0)
    assert OptimizerConfig(l2_reg=1e-5).resolved_l2_reg(unbounded=False) == 1e-5
    with pytest.raises(ConfigError, match="optimizer.l2_reg"):
        OptimizerConfig(l2_reg=-1.0)
    assert (cfg.loss.otype, cfg.loss.huber_delta) == ("L2", 0.1)
    tr = cfg.training
    assert (tr.n_steps, tr.seed, tr.precision, tr.device) == (35000, 1337, "tf32", "auto")
    assert (tr.target_samples_per_step, tr.initial_rays_per_step) == (2**18, 4096)
    assert (tr.occupancy_resolution, tr.occupancy_update_every, tr.occupancy_warmup_steps) == (
        128,
        16,
        256,
    )
    assert (tr.occupancy_decay, tr.occupancy_threshold, tr.max_march_steps) == (0.95, 0.01, 1024)
    assert (cfg.data.downscale, cfg.data.holdout_every, cfg.data.placement) == (None, 8, "auto")
    assert (cfg.data.format, cfg.data.camera_convention) == ("auto", "opengl")
    assert (cfg.parallel.mode, cfg.parallel.bucket_mib, cfg.parallel.overlap_comm) == (
        "data",
        25.0,
        False,
    )
    dist = cfg.distributed
    assert (dist.master_addr, dist.master_port, dist.timeout_s) == ("127.0.0.1", 0, 300.0)
    assert dist.gpu_capabilities == ()
    # Missing blocks and keys take the defaults.
    assert load_config(None) == cfg
    assert config_from_dict({}) == cfg
    assert config_from_dict({"training": {}, "encoding": {"n_levels": 16}}) == cfg


def test_blocks_are_frozen() -> None:
    cfg = TrainConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.training.n_steps = 5  # type: ignore[misc]


def test_direct_construction_validates_with_the_dotted_key() -> None:
    with pytest.raises(ConfigError) as info:
        EncodingConfig(n_levels=0)
    assert str(info.value) == "encoding.n_levels: expected an integer in [1, 32], got 0"
    with pytest.raises(ConfigError, match=r"^training\.subpixel_jitter: expected true or false, got 1$"):
        TrainingConfig(subpixel_jitter=1)  # type: ignore[arg-type]


def test_repo_presets_load() -> None:
    base = load_config(REPO / "configs" / "base.json")
    # instant-ngp's base config differs from the defaults only by its weight EMA, its later
    # learning-rate decay, its loss, and its hash grid's F=2, T=2^19 and MLP L2 regularisation 1e-6
    # named for every scene model.
    expected = dataclasses.replace(
        TrainConfig(), optimizer=dataclasses.replace(OptimizerConfig(), ema_decay=0.95, decay_start=20000,
                                                     decay_interval=10000, l2_reg=1e-6),
        loss=LossConfig(otype="Huber"),
        encoding=dataclasses.replace(EncodingConfig(), n_features_per_level=2, log2_hashmap_size=19),
    )
    assert base == expected

    small = load_config(REPO / "configs" / "small.json")
    assert small.encoding.n_levels == 8
    assert small.encoding.log2_hashmap_size == 15
    assert small.training.target_samples_per_step == 2**12
    assert small.training.occupancy_resolution == 64
    assert small.training.initial_rays_per_step <= small.training.max_rays_per_step

    # the 400-pixel NeRF-synthetic preset (its 35 dB run in docs/benchmarks.md) differs from the defaults in
    # exactly the two keys it names, and its N_max sets the finest level the grid builds.
    synthetic_400 = load_config(REPO / "configs" / "nerf_synthetic_400.json")
    expected = dataclasses.replace(
        TrainConfig(), encoding=dataclasses.replace(EncodingConfig(), max_resolution=512),
        training=dataclasses.replace(TrainingConfig(), eval_spp=8),
    )
    assert synthetic_400 == expected
    assert level_resolutions(hash_grid_config(synthetic_400.encoding, aabb_scale=1))[-1] == 512


# ---------------------------------------------------------------------------------------------
# instant-ngp / tiny-cuda-nn forms.
# ---------------------------------------------------------------------------------------------


def test_pasted_instant_ngp_config_loads(tmp_path: Path) -> None:
    path = tmp_path / "base.json"
    path.write_text(PASTED_NGP_CONFIG)
    cfg = load_config(path)
    assert cfg.optimizer == OptimizerConfig(
        learning_rate=0.01,
        beta1=0.9,
        beta2=0.99,
        epsilon=1e-15,
        l2_reg=1e-6,
        decay_start=20000,
        decay_interval=10000,
        decay_base=0.33,
        ema_decay=0.95,
    )
    assert cfg.dir_encoding == DirEncodingConfig("SphericalHarmonics", 4)
    assert cfg.rgb_network.n_hidden_layers == 2
    # distortion_map / envmap are ignored and not written back.
    assert set(config_to_dict(cfg)) == set(BLOCKS)


def test_nested_optimizer_is_normalised_to_the_flat_form() -> None:
    adam = {"otype": "Adam", "learning_rate": 5e-3, "beta2": 0.999}
    # Ema around Adam: no ExponentialDecay level → constant learning rate.
    cfg = config_from_dict({"optimizer": {"otype": "Ema", "decay": 0.9, "nested": adam}})
    assert cfg.optimizer == OptimizerConfig(
        learning_rate=5e-3, beta2=0.999, decay_base=1.0, ema_decay=0.9
    )
    # ExponentialDecay around Adam: no EMA; keys left out take the defaults.
    nested = {"otype": "ExponentialDecay", "decay_start": 100, "nested": adam}
    cfg = config_from_dict({"optimizer": nested})
    assert cfg.optimizer == OptimizerConfig(learning_rate=5e-3, beta2=0.999, decay_start=100)
    # Adam alone.
    assert config_from_dict({"optimizer": adam}).optimizer.decay_base == 1.0
    # Integers are accepted where numbers are expected and stored as floats.
    cfg = config_from_dict({"optimizer": {"otype": "Adam", "learning_rate": 1}})
    assert type(cfg.optimizer.learning_rate) is float and cfg.optimizer.learning_rate == 1.0


# ---------------------------------------------------------------------------------------------
# Error messages: dotted key and value on one line.
# ---------------------------------------------------------------------------------------------

NESTED_BAD_LR = {
    "otype": "Ema",
    "decay": 0.95,
    "nested": {
        "otype": "ExponentialDecay",
        "nested": {"otype": "Adam", "learning_rate": -1},
    },
}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"encoding": {"log2_hashmap_size": 32}},
            "encoding.log2_hashmap_size: expected null or an integer in [10, 24], got 32",
        ),
        ({"encoding": {"n_levels": 0}}, "encoding.n_levels: expected an integer in [1, 32], got 0"),
        (
            {"training": {"precision": "fp8"}},
            "training.precision: expected one of fp32, tf32, bf16, fp16, got 'fp8'",
        ),
        (
            {"encoding": {"n_levles": 8}},
            "unknown key 'encoding.n_levles' (did you mean 'n_levels'?)",
        ),
        ({"trainig": {}}, "unknown key 'trainig' (did you mean 'training'?)"),
        ({"training": {"n_steps": True}}, "training.n_steps: expected an integer >= 1, got True"),
        (
            {"encoding": {"base_resolution": 16.0}},
            "encoding.base_resolution: expected an integer >= 2, got 16.0",
        ),
        (
            {"encoding": {"n_features_per_level": 3}},
            "encoding.n_features_per_level: expected null or one of 1, 2, 4, 8, got 3",
        ),
        (
            {
                "distributed": {
                    "gpu_capabilities": [
                        {"rank": 0, "type": "H200", "compute_power": 1.0},
                        {"rank": 0, "type": "A100", "compute_power": 0.5},
                    ]
                }
            },
            "distributed.gpu_capabilities[1].rank: duplicate rank 0 "
            "(also in distributed.gpu_capabilities[0])",
        ),
        (
            {"distributed": {"gpu_capabilities": [{"rank": 0, "compute_pwr": 1}]}},
            "unknown key 'distributed.gpu_capabilities[0].compute_pwr' "
            "(did you mean 'compute_power'?)",
        ),
        (
            {"distributed": {"gpu_capabilities": [{"rank": 1}]}},
            "distributed.gpu_capabilities[0]: missing key 'compute_power'",
        ),
        (
            {"data": {"aabb_scale": 3}},
            "data.aabb_scale: expected null or a power of two in [1, 128], got 3",
        ),
        (
            {"distributed": {"master_port": 70000}},
            "distributed.master_port: expected an integer in [0, 65535], got 70000",
        ),
        (
            {"optimizer": NESTED_BAD_LR},
            "optimizer.nested.nested.learning_rate: expected a number > 0, got -1",
        ),
        (
            {"optimizer": {"otype": "Ema", "decay": 0.95, "nested": {"otype": "SGD"}}},
            "optimizer.nested.otype: expected one of ExponentialDecay, Adam, got 'SGD'",
        ),
        (
            {"optimizer": {"otype": "Ema", "decay": 1.5, "nested": {"otype": "Adam"}}},
            "optimizer.decay: expected null or a number in (0, 1), got 1.5",
        ),
        (
            {
                "dir_encoding": {
                    "otype": "Composite",
                    "nested": [{"otype": "SphericalHarmonics"}, {"otype": "Frequency"}],
                }
            },
            "dir_encoding.nested[1].otype: expected one of Identity, OneBlob after the "
            "SphericalHarmonics entry, got 'Frequency'",
        ),
        (
            {"dir_encoding": {"otype": "SphericalHarmonics", "degree": 5}},
            "dir_encoding.degree: expected an integer in [1, 4], got 5",
        ),
        (
            {"dir_encoding": {"otype": "Composite", "nested": [{"otype": "Identity"}]}},
            "dir_encoding.nested[0].otype: expected SphericalHarmonics (it encodes the ray "
            "direction), got 'Identity'",
        ),
        (
            {"training": {"max_rays_per_step": 100}},
            "training.max_rays_per_step: expected an integer >= training.initial_rays_per_step "
            "(4096), got 100",
        ),
        (
            {"encoding": {"per_level_scale": 1.5, "max_resolution": 4096}},
            "encoding.max_resolution: set either it or encoding.per_level_scale, not both "
            "(got 4096 and 1.5)",
        ),
        (
            {"network": {"n_neurons": 40}},
            "network.n_neurons: expected a multiple of 16 in [16, 256], got 40",
        ),
        (
            {"training": {"device": "gpu"}},
            "training.device: expected auto, cpu, cuda or cuda:N, got 'gpu'",
        ),
        (
            {"training": {"time_budget_s": math.inf}},
            "training.time_budget_s: expected null or a number > 0, got inf (not a finite number)",
        ),
        (
            {"parallel": {"mode": "subgrid", "num_subgrids": 2}, "distributed": {"world_size": 4}},
            "parallel.num_subgrids: expected at least one box per rank (>= world size 4) in subgrid "
            "mode, got 2",
        ),
        (
            {"training": {"occupancy_resolution": 63}},
            "training.occupancy_resolution: expected an even integer in [2, 1024], got 63",
        ),
        (
            {"training": {"appearance": "latent"}},
            "training.appearance: expected one of off, affine, got 'latent'",
        ),
        (
            {"training": {"appearance": "affine"}, "parallel": {"mode": "subgrid"}},
            "training.appearance: expected 'off' in subgrid mode (a ray's colour is composited across "
            "ranks), got 'affine'",
        ),
        ({"training": 3}, "training: expected an object, got 3"),
        (
            {"training": {"eval_at_s": [4, 2**40]}},
            f"training.eval_at_s: expected a list of distinct integers in [1, 2,147,483,648], got [4, {2**40}]",
        ),
        ({"training": {"eval_at_s": [4, 4]}}, "training.eval_at_s: expected a list of distinct integers in "
                                              "[1, 2,147,483,648], got [4, 4]"),
    ],
)
def test_error_names_dotted_key_and_value(data: dict, message: str) -> None:
    assert _error(data) == f"<config>: {message}"


def test_valid_edge_values_are_accepted() -> None:
    cfg = config_from_dict(
        {
            "training": {"device": "cuda:3", "cone_angle": 0},
            "data": {"aabb_scale": 128},
            "parallel": {"overlap": 0.5},
            "distributed": {"master_port": 65535, "world_size": 2},
        }
    )
    assert cfg.training.device == "cuda:3"
    assert cfg.training.cone_angle == 0.0 and type(cfg.training.cone_angle) is float
    assert cfg.data.aabb_scale == 128
    assert cfg.distributed.master_port == 65535


def test_syntax_error_names_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    # Line 3 is `    "n_steps" 200,` (no colon): the "2" is at column 15.
    path.write_text('{\n  "training": {\n    "n_steps" 200,\n  },\n}\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f'{path}:3:15: invalid JSON5: Unexpected "2"'


def test_duplicate_keys_and_missing_file_are_errors(tmp_path: Path) -> None:
    path = tmp_path / "dup.json"
    path.write_text('{"training": {"n_steps": 1, "n_steps": 2}}')
    with pytest.raises(ConfigError, match="dup.json: invalid JSON5: Duplicate key"):
        load_config(path)
    missing = tmp_path / "nope.json"
    with pytest.raises(ConfigError) as info:
        load_config(missing)
    assert str(info.value) == f"{missing}: config file not found"


def test_value_error_in_a_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "cfg.json5"
    path.write_text("{encoding: {log2_hashmap_size: 32,},}")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == (
        f"{path}: encoding.log2_hashmap_size: expected null or an integer in [10, 24], got 32"
    )


# ---------------------------------------------------------------------------------------------
# Overrides.
# ---------------------------------------------------------------------------------------------


def test_apply_overrides() -> None:
    cfg = TrainConfig()
    new = apply_overrides(cfg, {"training.precision": "bf16", "encoding.log2_hashmap_size": 15})
    assert new.training.precision == "bf16"
    assert new.encoding.log2_hashmap_size == 15
    assert cfg.training.precision == "tf32"  # unchanged
    assert dataclasses.replace(new, training=cfg.training, encoding=cfg.encoding) == cfg

    caps = [{"rank": 1, "type": "H200", "compute_power": 2}, {"rank": 0, "compute_power": 1}]
    new = apply_overrides(cfg, {"distributed.gpu_capabilities": caps})
    assert new.distributed.gpu_capabilities == (
        GpuCapability(rank=1, compute_power=2.0, type="H200"),
        GpuCapability(rank=0, compute_power=1.0, type=""),
    )

    with pytest.raises(ConfigError) as info:
        apply_overrides(cfg, {"training.n_step": 200})
    assert str(info.value) == (
        "overrides: unknown key 'training.n_step' (did you mean 'training.n_steps'?)"
    )
    with pytest.raises(ConfigError) as info:
        apply_overrides(cfg, {"encoding.log2_hashmap_size": 32})
    assert str(info.value) == (
        "overrides: encoding.log2_hashmap_size: expected null or an integer in [10, 24], got 32"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("training.n_steps=200", ("training.n_steps", 200)),
        ("optimizer.learning_rate=1e-3", ("optimizer.learning_rate", 1e-3)),
        ("training.precision=bf16", ("training.precision", "bf16")),
        ("training.precision='fp16'", ("training.precision", "fp16")),
        ("data.scene=null", ("data.scene", None)),
        ("data.scene=/data/my scene", ("data.scene", "/data/my scene")),
        ("training.subpixel_jitter=true", ("training.subpixel_jitter", True)),
        (
            "distributed.gpu_capabilities=[{rank: 0, compute_power: 2,}]",
            ("distributed.gpu_capabilities", [{"rank": 0, "compute_power": 2}]),
        ),
    ],
)
def test_parse_override(text: str, expected: tuple[str, object]) -> None:
    assert parse_override(text) == expected


def test_parse_override_rejects_text_without_key() -> None:
    for text in ("training.n_steps", "=3"):
        with pytest.raises(ConfigError, match="expected KEY=VALUE"):
            parse_override(text)


def test_parsed_overrides_apply() -> None:
    overrides = dict(parse_override(t) for t in ["training.n_steps=200", "training.device=cuda:1"])
    cfg = apply_overrides(TrainConfig(), overrides)
    assert (cfg.training.n_steps, cfg.training.device) == (200, "cuda:1")


# ---------------------------------------------------------------------------------------------
# Round trip.
# ---------------------------------------------------------------------------------------------


def _non_default_config() -> TrainConfig:
    return TrainConfig(
        encoding=EncodingConfig(n_levels=8, log2_hashmap_size=15, max_resolution=1024),
        optimizer=OptimizerConfig(learning_rate=3e-3, ema_decay=0.95, decay_base=1),
        training=TrainingConfig(
            n_steps=200, time_budget_s=12.5, precision="bf16", cone_angle=0.004, subpixel_jitter=False
        ),
        distributed=DistributedConfig(
            world_size=2,
            gpu_capabilities=(
                GpuCapability(rank=0, compute_power=1.0, type="H200"),
                GpuCapability(rank=1, compute_power=0.5),
            ),
        ),
    )


@pytest.mark.parametrize("cfg", [TrainConfig(), _non_default_config()], ids=["default", "custom"])
def test_round_trip(cfg: TrainConfig, tmp_path: Path) -> None:
    data = config_to_dict(cfg)
    assert config_from_dict(data) == cfg
    assert config_from_dict(json.loads(json.dumps(data))) == cfg
    assert data["optimizer"].keys() == {f.name for f in dataclasses.fields(OptimizerConfig)}
    text = dump_config(cfg)
    assert json.loads(text) == data
    path = tmp_path / "printed.json"
    path.write_text(text)
    assert load_config(path) == cfg


# ---------------------------------------------------------------------------------------------
# Derived values.
# ---------------------------------------------------------------------------------------------


def test_finest_resolution_and_per_level_scale() -> None:
    def growth(enc: EncodingConfig, aabb_scale: int) -> float:
        return hash_grid_config(enc, aabb_scale).growth_factor

    enc = EncodingConfig()  # L=16, N_min=16
    assert enc.finest_resolution(1) == 2048 and enc.finest_resolution(16) == 2048 * 16
    # N_max = 2048·aabb_scale: b = (N_max / N_min)^(1/15).
    assert growth(enc, 1) == pytest.approx(128 ** (1 / 15))
    assert growth(enc, 16) == pytest.approx(2048 ** (1 / 15))
    # The finest level reaches N_max: N_min · b^(L-1) = 2048·8.
    assert 16 * growth(enc, 8) ** 15 == pytest.approx(2048 * 8)
    # max_resolution 512 over 3 levels from 16: b = (512/16)^(1/2).
    enc = EncodingConfig(n_levels=3, max_resolution=512)
    assert enc.finest_resolution(4) == 512
    assert growth(enc, 4) == pytest.approx(math.sqrt(32))
    assert EncodingConfig(per_level_scale=1.5).finest_resolution(64) is None
    assert growth(EncodingConfig(per_level_scale=1.5), 64) == 1.5
    assert growth(EncodingConfig(n_levels=1), 1) == 1.0


def test_finest_resolution_from_the_views_pixel_footprint() -> None:
    enc = EncodingConfig()  # N_min = 16
    # the smallest power of two at or above the footprint resolution...
    assert enc.finest_resolution(1, 417.6) == 512 and enc.finest_resolution(1, 512.0) == 512
    assert enc.finest_resolution(4, 3279.8) == 4096 and enc.finest_resolution(4, 4097.0) == 8192
    # ...never above instant-ngp's 2048·aabb_scale, never below 2·N_min
    assert enc.finest_resolution(1, 3000.0) == 2048 and enc.finest_resolution(2, 3000.0) == 4096
    assert enc.finest_resolution(1, 5.0) == 32 and enc.finest_resolution(1, 0.3) == 32
    # an explicit N_max or a growth factor wins over the views
    assert EncodingConfig(max_resolution=1024).finest_resolution(1, 417.6) == 1024
    assert EncodingConfig(per_level_scale=1.5).finest_resolution(1, 417.6) is None
    assert level_resolutions(hash_grid_config(enc, 1, 417.6))[-1] == 512


def test_a_factor_scales_the_derived_finest_resolution() -> None:
    from trainer.contract.config import apply_overrides

    assert EncodingConfig(max_resolution_factor=0.5).finest_resolution(1, 417.6) == 256
    assert EncodingConfig(max_resolution_factor=2.0).finest_resolution(1, 417.6) == 1024
    assert EncodingConfig(max_resolution_factor=2.0).finest_resolution(1, 3000.0) == 4096  # past 2048·aabb_scale
    assert EncodingConfig(max_resolution_factor=0.25).finest_resolution(1, 5.0) == 32  # never below 2·N_min
    assert EncodingConfig(max_resolution_factor=2.0).finest_resolution(2) == 8192  # without views: 2048·aabb_scale
    with pytest.raises(ConfigError, match="encoding.max_resolution_factor: scales the derived finest resolution; "
                                          "with encoding.max_resolution set there is none to scale"):
        apply_overrides(TrainConfig(), {"encoding.max_resolution": 512, "encoding.max_resolution_factor": 2})
    with pytest.raises(ConfigError, match="encoding.max_resolution_factor"):
        apply_overrides(TrainConfig(), {"encoding.max_resolution_factor": 0})


def test_resolved_cone_angle() -> None:
    training = TrainingConfig()
    assert training.resolved_cone_angle(1) == 0.0
    assert training.resolved_cone_angle(2) == 1 / 256
    assert TrainingConfig(cone_angle=0.01).resolved_cone_angle(1) == 0.01
