"""One spelling of categorical values in study reports: ``none`` whether a value came as Python's
None, a config's null or the string ``"None"``; booleans as study files write them."""

from __future__ import annotations

from ngptune.reporting.study_data import category_text, cell_text


def test_spellings_of_none_are_one():
    assert {category_text(None), category_text("None"), category_text("none"), category_text("NONE")} == {"none"}


def test_booleans_numbers_and_strings():
    assert (category_text(True), category_text(False)) == ("true", "false")
    assert (category_text(3), category_text(0.5), category_text("bf16")) == ("3", "0.5", "bf16")


def test_a_table_cell_is_empty_only_when_the_value_is_missing():
    assert cell_text(None) == ""
    assert cell_text("None") == "none"
    assert cell_text(False) == "false"
