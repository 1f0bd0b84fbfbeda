"""Airflow assets for Lockgate jobs: ``lockgate://jobs/<job>``.

Every completed cycle window of a job can emit an asset event (see
:class:`~lockgate_provider.operators.lockgate.LockgateRunWindowsOperator`); downstream DAGs
schedule on :func:`lockgate_asset`. The ``lockgate`` URI scheme is registered by the
provider (``asset-uris``), so ``Asset("lockgate://jobs/bids")`` is checked like any other.

>>> from lockgate_provider.assets import lockgate_asset, lockgate_windows_alias
>>> lockgate_asset("bids").uri
'lockgate://jobs/bids'
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, AssetAlias

if TYPE_CHECKING:
    from urllib.parse import SplitResult

_JOB = re.compile(r"^[A-Za-z0-9_-]+$")


def lockgate_asset(job: str, **kwargs: Any) -> Asset:
    """The asset that stands for the committed output of Lockgate job ``job``.

    :param job: the job name (by default a pipeline's name).
    :param kwargs: passed to :class:`airflow.sdk.Asset` (``extra``, ``group``, ...).
    """
    if not _JOB.match(job):
        raise ValueError(f"Lockgate job name {job!r}: use letters, digits, '_' and '-' only")
    return Asset(name=f"lockgate/{job}", uri=f"lockgate://jobs/{job}", **kwargs)


def lockgate_windows_alias(job: str) -> AssetAlias:
    """An asset alias through which a run emits one event *per completed window* of ``job``
    (each with its own window id and row counts), all attached to :func:`lockgate_asset`."""
    return AssetAlias(name=f"lockgate/{job}/windows")


def create_asset(*, job: str, extra: dict[str, Any] | None = None) -> Asset:
    """The ``asset-uris`` factory of the ``lockgate`` scheme."""
    return lockgate_asset(job, **({"extra": extra} if extra else {}))


def sanitize_uri(uri: SplitResult) -> SplitResult:
    """Check a ``lockgate://jobs/<job>`` URI (the ``asset-uris`` handler of the scheme)."""
    job = uri.path.strip("/")
    if uri.netloc != "jobs" or not job or not _JOB.match(job):
        raise ValueError(
            f"Lockgate asset URI {uri.geturl()!r}: the form is lockgate://jobs/<job>, the job name made "
            "of letters, digits, '_' and '-'"
        )
    return uri
