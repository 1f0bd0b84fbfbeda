"""Read-only, locked and full catalogs as errors that name the database and the fix.

The database driver says "attempt to write a readonly database" or "database is locked";
:func:`unavailable_error` turns those (SQLite result codes, PostgreSQL SQLSTATEs) into
:class:`~lockgate.errors.CatalogReadOnlyError`, :class:`~lockgate.errors.CatalogLockedError` or
:class:`~lockgate.errors.CatalogFullError`,
and leaves every other database error alone.
"""

from __future__ import annotations

import errno
import os
import pwd
import shutil
import sqlite3
from pathlib import Path

import sqlalchemy as sa

from ...errors import CatalogFullError, CatalogLockedError, CatalogReadOnlyError, CatalogUnavailableError
from .connection import busy_timeout_s, sqlite_file

ELSEWHERE = "or point the catalog elsewhere (--catalog URL, or LOCKGATE_HOME for the default <home>/catalog.db)"

_PG_READ_ONLY = "25006"  # read_only_sql_transaction: a hot standby, or default_transaction_read_only
_PG_NO_PRIVILEGE = "42501"  # insufficient_privilege
_PG_LOCKED = "55P03"  # lock_not_available: lock_timeout expired
_PG_DISK_FULL = "53100"  # disk_full
#: a folder with less free space than this, after a failed write, counts as full
_FULL_BYTES = 1 << 20


def _user() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"


def _free_bytes(folder: Path) -> int:
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return 1 << 62  # cannot tell: not blamed on a full disk


def _free(folder: Path) -> str:
    free = _free_bytes(folder)
    return "unknown space" if free == 1 << 62 else f"{free / 1024:.0f} KiB"


def _detail(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def unavailable_error(exc: sa.exc.DBAPIError, url: sa.URL) -> CatalogUnavailableError | None:
    """The Lockgate error for a read-only or locked catalog at ``url``; None for any other error."""
    if url.get_backend_name() == "sqlite":
        return _sqlite_error(exc.orig, url)
    if url.get_backend_name() == "postgresql":
        return _postgresql_error(exc.orig, url)
    return None


def _sqlite_error(orig: BaseException, url: sa.URL) -> CatalogUnavailableError | None:
    code = getattr(orig, "sqlite_errorcode", None)
    path = sqlite_file(url)
    if code is None or path is None:
        return None
    primary = code & 0xFF  # extended result codes keep the primary code in the low byte
    where = f"the catalog database {path}"
    files = f"{path.name}, {path.name}-wal and {path.name}-shm"
    if primary == sqlite3.SQLITE_READONLY:
        if url.query.get("mode") == "ro":
            return CatalogReadOnlyError(
                f"{where} is opened read-only by its URL (mode=ro): {_detail(orig)}. Drop mode=ro from "
                f"the catalog URL to write to it, {ELSEWHERE}"
            )
        return CatalogReadOnlyError(
            f"{where} is read-only for this process (user {_user()}): {_detail(orig)}. Make {path} and "
            f"its folder {path.parent} writable by this user (SQLite writes {files} there), {ELSEWHERE}"
        )
    if primary == sqlite3.SQLITE_CANTOPEN:
        return CatalogReadOnlyError(
            f"cannot open {where} (user {_user()}): {_detail(orig)}. Make sure its folder {path.parent} "
            f"exists and is writable by this user (SQLite creates {files} there), {ELSEWHERE}"
        )
    if primary in (sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR):
        # SQLite reports a full disk as SQLITE_FULL while writing pages, but as a plain I/O
        # error when it cannot create its -wal or -shm file: the free space tells which
        if primary == sqlite3.SQLITE_FULL or _free_bytes(path.parent) < _FULL_BYTES:
            return CatalogFullError(
                f"the disk under {where} is full ({_detail(orig)}; {_free(path.parent)} free in "
                f"{path.parent}). Free space there, then run again: nothing committed was lost, {ELSEWHERE}"
            )
        return CatalogUnavailableError(
            f"{where} cannot be read or written: {_detail(orig)}. Check the file system under {path.parent} "
            f"(a mount gone, a network file system, which SQLite does not support), {ELSEWHERE}"
        )
    if primary in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        return CatalogLockedError(
            f"{where} is locked: another process held its write lock for longer than the busy timeout "
            f"({busy_timeout_s(url):g} s) ({_detail(orig)}). Retry once that process is done (another "
            f"lockgate command, worker or server using {path}, or a stuck one), raise the busy timeout "
            f"with ?timeout=SECONDS on the catalog URL (--catalog 'sqlite:///{path}?timeout=120'), or use "
            "a PostgreSQL catalog (--catalog postgresql://...) for many concurrent writers"
        )
    return None


def _postgresql_error(orig: BaseException, url: sa.URL) -> CatalogUnavailableError | None:
    state = getattr(orig, "sqlstate", None)
    where = f"the PostgreSQL catalog {url.render_as_string(hide_password=True)}"
    if state == _PG_READ_ONLY:
        return CatalogReadOnlyError(
            f"{where} is read-only: {_detail(orig)}. Point --catalog at the primary server, not a "
            "read-only standby, or turn default_transaction_read_only off for this database and user"
        )
    if state == _PG_NO_PRIVILEGE:
        return CatalogReadOnlyError(
            f"{where} refused a write: {_detail(orig)}. Grant the catalog user {url.username!r} write "
            "access (SELECT, INSERT, UPDATE, DELETE on the lg_* tables and USAGE on their sequences; "
            f"CREATE on the schema for a new catalog), {ELSEWHERE}"
        )
    if state == _PG_DISK_FULL:
        return CatalogFullError(
            f"{where} is out of disk space: {_detail(orig)}. Free space on the database server, then run "
            "again: nothing committed was lost"
        )
    if state == _PG_LOCKED:
        return CatalogLockedError(
            f"{where} is locked: {_detail(orig)}; another session held a lock on a catalog row or table "
            "for longer than lock_timeout. Retry once that session is done, or raise lock_timeout "
            "(e.g. ?options=-c%20lock_timeout%3D60s on the catalog URL)"
        )
    return None


def folder_error(exc: OSError, folder: Path) -> CatalogReadOnlyError | None:
    """The Lockgate error for a SQLite catalog folder that cannot be created; None for other OSErrors."""
    if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
        return None
    folder = Path(exc.filename) if exc.filename else folder
    return CatalogReadOnlyError(
        f"cannot create the catalog folder {folder} (user {_user()}): {exc.strerror}. Create it and make it "
        f"writable by this user, {ELSEWHERE}"
    )
