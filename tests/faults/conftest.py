"""Fixtures of the fault-injection suite: the tally of faults and rows (written as a JSON
summary when ``LOCKGATE_FAULTS_SUMMARY`` names a file), the sinks' disk, no run left behind."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from faultlib import Tally, kill_leftovers, progress, write_summary
from private_postgres import PrivatePostgres
from small_disk import SmallDisk, mount, unmount

_TALLY = Tally()


@pytest.fixture(scope="session")
def tally() -> Iterator[Tally]:
    """Faults done, rows checked and recovery times of the whole session."""
    yield _TALLY
    path = os.environ.get("LOCKGATE_FAULTS_SUMMARY")
    if path:
        summary = write_summary(_TALLY, path)
        progress(f"summary written to {path}:\n{json.dumps(summary, indent=2)}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    report = yield
    if report.failed and "tally" in getattr(item, "fixturenames", ()):
        _TALLY.failures.append(f"{item.name}: {str(call.excinfo.value).splitlines()[0][:500]}")
    return report


@pytest.fixture(autouse=True)
def _no_run_outlives_its_test() -> Iterator[None]:
    yield
    kill_leftovers()


@pytest.fixture
def sinks_disk(tmp_path: Path) -> Iterator[SmallDisk | None]:
    """A 64 MiB tmpfs for the sinks' output, to fill and free again; None where no tmpfs can be
    mounted (not root): the other faults still run, only the full disk is left out."""
    path = tmp_path / "sinks_disk"
    try:
        mount(path, "size=64m,nr_inodes=50000")
    except pytest.skip.Exception as why:
        warnings.warn(f"the full-disk fault is left out: {why}", stacklevel=1)
        yield None
        return
    try:
        yield SmallDisk(path)
    finally:
        unmount(path)


@pytest.fixture
def sink_postgres() -> Iterator[PrivatePostgres]:
    """The sinks' private PostgreSQL, stopped and started by the faults, in a folder of its own
    outside pytest's temporary root: any pytest started meanwhile on the machine makes that
    root private again, and a server running as another user could not start there twice."""
    base = Path(tempfile.mkdtemp(prefix="lockgate-faults-pg-"))
    try:
        with PrivatePostgres(base) as pg:
            yield pg
    finally:
        shutil.rmtree(base, ignore_errors=True)
