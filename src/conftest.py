"""Docstring examples make folders with ``tempfile.mkdtemp()`` (the call a reader would copy); under pytest they land in
the example's own temporary folder, which pytest prunes, instead of piling up in the system's temporary folder."""
import tempfile

import pytest


@pytest.fixture(autouse=True)
def _examples_write_under_pytest_tmp(request, monkeypatch):
    if isinstance(request.node, pytest.DoctestItem):
        monkeypatch.setattr(tempfile, "tempdir", str(request.getfixturevalue("tmp_path")))
