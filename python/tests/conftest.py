"""Shared by kiln's own Python tests: `no_leak`, the check that a test leaves kiln's count of
live variables where it found it (every array, trace and recording a test made is freed once its
Python objects are). A test file opts in with ``pytestmark = pytest.mark.usefixtures("no_leak")``:
the thread tests do not (other threads' variables come and go), nor do the upstream ports."""

import gc

import pytest

import kiln


@pytest.fixture
def no_leak():
    gc.collect()
    before = kiln.stats()["vars_alive"]
    yield
    gc.collect()
    assert kiln.stats()["vars_alive"] == before
