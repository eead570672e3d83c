"""The line of a run the time budget stopped says why it stopped short of the budget."""

from __future__ import annotations

from trainer.contract.textlines import LINE_WIDTH, joined
from trainer.run.finish import budget_stop_text


def test_the_budget_line_names_the_next_steps_expected_length():
    lines = budget_stop_text(205, 1000, 57.6, 60.4, 60.0).splitlines()
    assert all(len(line) <= LINE_WIDTH for line in lines), lines
    assert joined(lines) == ("stopped at step 205 of 1000 after 57.6 s: the next step, expected to take 2.8 s, "
                             "would pass the time budget of 60 s (training.time_budget_s, --time-budget)")
    assert any("would pass the time budget of 60 s" in line for line in lines), lines  # the budget beside its words


def test_a_last_step_past_the_budget_is_said_as_such():
    lines = budget_stop_text(17, 2000, 6.3, 6.46, 5.0).splitlines()
    assert all(len(line) <= LINE_WIDTH for line in lines), lines
    assert joined(lines) == ("stopped at step 17 of 2000 after 6.3 s: the last step ran 1.3 s past the time budget "
                             "of 5 s (training.time_budget_s, --time-budget), longer than the steps before it")


def test_a_resumed_run_whose_budget_was_spent_says_no_step_ran_here():
    """Resumed at step 85 with 4.0 s trained against a 3 s budget: no step ran in this process, so
    the line is about the resume, not about a last step that belonged to the run before."""
    lines = budget_stop_text(85, 200, 4.0, 4.05, 3.0, resumed_step=85).splitlines()
    assert all(len(line) <= LINE_WIDTH for line in lines), lines
    assert joined(lines) == ("stopped at step 85 of 200, where it resumed: the time budget of 3 s "
                             "(training.time_budget_s, --time-budget) was spent before the resume (4.0 s of training)")
    took_steps = budget_stop_text(87, 200, 4.1, 4.15, 4.0, resumed_step=85)  # steps ran here: the usual line
    assert "where it resumed" not in took_steps and "the last step ran 100.0 ms past" in took_steps
