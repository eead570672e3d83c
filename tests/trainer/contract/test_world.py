"""The world-size rules (trainer.contract.world): one message per rule, whoever checks it."""

from __future__ import annotations

import pytest

from trainer.contract import ConfigError, apply_overrides, check_boxes_per_rank, check_world_size, load_config

BOXES = "parallel.num_subgrids: expected at least one box per rank (>= world size 3) in subgrid mode, got 2"


def _cfg(**overrides):
    return apply_overrides(load_config(None), overrides)


def test_each_rule_names_the_key_and_both_values():
    cases = [
        ({"parallel.mode": "subgrid", "parallel.num_subgrids": 2}, 3, BOXES),
        ({"distributed.world_size": 3}, 2, "distributed.world_size: config says 3 but 2 processes were started"),
        ({"distributed.world_size": 2}, 1, "distributed.world_size: config says 2 but 1 process were started"),
        ({"distributed.gpu_capabilities": [{"rank": 0, "compute_power": 1.0}, {"rank": 2, "compute_power": 1.0}]}, 2,
         "distributed.gpu_capabilities[1].rank: expected a rank < world size (2), got 2"),
        ({"faults.ranks": [0, 5]}, 2, "faults.ranks[1]: expected a rank < world size (2), got 5"),
    ]
    for overrides, world_size, message in cases:
        with pytest.raises(ConfigError) as caught:
            check_world_size(_cfg(**overrides), world_size)
        assert str(caught.value) == message


def test_a_fitting_config_passes_and_data_mode_ignores_the_box_count():
    check_world_size(_cfg(**{"parallel.mode": "subgrid", "parallel.num_subgrids": 3, "faults.ranks": [2]}), 3)
    check_world_size(_cfg(**{"parallel.num_subgrids": 1}), 4)
    with pytest.raises(ConfigError, match=r"^distributed\.world_size: expected an integer >= 1, got 0$"):
        check_world_size(_cfg(), 0)


def test_the_config_file_the_box_assignment_and_the_job_say_the_same():
    with pytest.raises(ConfigError) as from_job:
        check_boxes_per_rank(2, 3)
    with pytest.raises(ConfigError) as from_file:
        apply_overrides(load_config(None), {"parallel.mode": "subgrid", "parallel.num_subgrids": 2,
                                            "distributed.world_size": 3})
    from trainer.parallel.partition import assign_boxes

    with pytest.raises(ConfigError) as from_assignment:
        assign_boxes(2, 3)
    assert str(from_job.value) == BOXES
    assert str(from_file.value) == f"overrides: {BOXES}"
    assert str(from_assignment.value) == BOXES
