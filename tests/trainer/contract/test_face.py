"""The contract's face (trainer.contract): every name it gives resolves, and it gives the whole
config package."""

from __future__ import annotations

import importlib

import trainer.contract as contract


def test_every_name_of_the_face_resolves_to_its_module():
    for module, names in contract.FACE.items():
        source = importlib.import_module(f"trainer.contract.{module}")
        for name in names:
            assert getattr(contract, name) is getattr(source, name), name
    assert sorted(contract.FACE["config"]) == sorted(importlib.import_module("trainer.contract.config").__all__)


def test_an_unknown_name_is_an_attribute_error():
    try:
        contract.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("no AttributeError")
