"""A storage URL whose database driver is not installed is refused naming the package to install."""

from __future__ import annotations

import pytest

pytest.importorskip("optuna")

from ngptune.tuning.layout import StudyDir  # noqa: E402
from ngptune.tuning.storage import SweepError, missing_driver, open_storage  # noqa: E402


def test_the_package_of_each_driver() -> None:
    missing = ImportError("Failed to import DB access module for the specified storage URL.")
    assert missing_driver("postgresql+psycopg2://u:p@host/db", missing) == "psycopg2-binary"
    assert missing_driver("postgresql://u:p@host/db", missing) == "psycopg2-binary"
    assert missing_driver("mysql+pymysql://u:p@host/db", missing) == "pymysql"
    assert missing_driver("postgresql+pg8000://u:p@host/db", missing) == "pg8000"
    assert missing_driver("postgresql+psycopg2://u:p@host/db", RuntimeError("connection refused")) is None


def test_a_missing_driver_is_named_with_its_package(tmp_path) -> None:
    url = "postgresql+pg8000://user:secret@localhost:1/db"
    with pytest.raises(SweepError) as caught:
        open_storage(url, StudyDir(tmp_path / "study"))
    message = str(caught.value)
    assert message == ("--storage postgresql+pg8000://user:***@localhost:1/db: cannot open the study storage: its "
                       "database driver is not installed (pip install pg8000)"), message
