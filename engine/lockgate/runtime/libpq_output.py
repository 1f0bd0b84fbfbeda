"""Keep libpq's own prints off the process's standard error.

ADBC's PostgreSQL driver silences libpq's notice processor on the connections it hands
out, but not on the connection it opens while it connects (to load the server's types).
A server message that arrives there, such as ``FATAL:  terminating connection due to
administrator command`` when the database shuts down mid-connect, goes to libpq's default
processor, which writes it straight to file descriptor 2. The driver then raises the same
failure as an exception, which Lockgate reports as its one error line; the raw line
before it is noise, and breaks the CLI's promise of one line per error.

:func:`quiet_libpq` sends descriptor 2 to a temporary file while it is held, then
writes back everything captured except libpq's server-message lines (logged at debug
level instead). Other output of the process written meanwhile is delayed, not lost.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile
import threading
from collections.abc import Iterator
from typing import IO

log = logging.getLogger(__name__)

#: libpq formats a server message as ``SEVERITY:  text`` (two spaces).
_SERVER_LINE = re.compile(rb"^(FATAL|PANIC|ERROR|WARNING|NOTICE|INFO|LOG|DEBUG):  ")

_lock = threading.Lock()
_holders = 0
_saved_fd: int | None = None
_capture: IO[bytes] | None = None


def _split(captured: bytes) -> tuple[bytes, list[bytes]]:
    """``(other output, libpq server lines)`` of what was captured."""
    kept: list[bytes] = []
    dropped: list[bytes] = []
    for line in captured.splitlines(keepends=True):
        (dropped if _SERVER_LINE.match(line) else kept).append(line)
    return b"".join(kept), [ln.rstrip() for ln in dropped]


@contextlib.contextmanager
def quiet_libpq() -> Iterator[None]:
    """Hold descriptor 2 away from the terminal while libpq may print to it.

    Reentrant across threads: the first holder redirects, the last one restores and
    replays, so concurrent connects never restore each other's descriptors.

    Example::

        with quiet_libpq():
            conn = adbc_driver_postgresql.dbapi.connect(uri)
    """
    global _holders, _saved_fd, _capture
    with _lock:
        if _holders == 0:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            capture = tempfile.TemporaryFile(prefix="lockgate-libpq-")  # noqa: SIM115 (the last holder closes it)
            _saved_fd = os.dup(2)
            os.dup2(capture.fileno(), 2)
            _capture = capture
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _saved_fd is not None and _capture is not None:
                with contextlib.suppress(Exception):
                    sys.stderr.flush()
                os.dup2(_saved_fd, 2)
                os.close(_saved_fd)
                _capture.seek(0)
                other, server_lines = _split(_capture.read())
                _capture.close()
                _saved_fd, _capture = None, None
                if other:
                    os.write(2, other)
                for line in server_lines:
                    log.debug("libpq: %s", line.decode(errors="replace"))
