"""libpq's own server-message prints stay off standard error; other output survives."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import os, sys, threading
    from lockgate.runtime.libpq_output import quiet_libpq

    def connect_like_libpq(n):
        with quiet_libpq():
            # what libpq's default notice processor does: a raw write to descriptor 2
            os.write(2, b"FATAL:  terminating connection due to administrator command\\n")
            os.write(2, f"other output {n}\\n".encode())

    threads = [threading.Thread(target=connect_like_libpq, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("after", file=sys.stderr, flush=True)
    os.write(2, b"FATAL:  printed outside the guard stays\\n")
    """
)


def test_server_lines_are_dropped_and_other_output_is_replayed_across_threads() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert "FATAL:  terminating connection due to administrator command" not in lines
    assert sorted(ln for ln in lines if ln.startswith("other output")) == [f"other output {n}" for n in range(8)]
    # descriptor 2 is the real one again once every holder has left
    assert lines[-2:] == ["after", "FATAL:  printed outside the guard stays"]
