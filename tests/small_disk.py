"""Small disks for tests of full and read-only storage: tmpfs mounts (root only; the
fixtures ``small_disk`` and ``read_only_disk`` skip where mounting is impossible)."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest


class SmallDisk:
    """A 2 MiB tmpfs with room for 200 files, to fill and free again."""

    def __init__(self, path: Path):
        self.path = path
        self.fillers: list[Path] = []

    def fill(self) -> None:
        """Take every byte left."""
        filler = self.path / f"filler-{len(self.fillers)}"
        self.fillers.append(filler)
        with open(filler, "wb", buffering=0) as f:  # unbuffered: nothing left to flush at close
            try:
                while True:
                    f.write(b"\0" * 65536)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
        assert os.statvfs(self.path).f_bavail == 0

    def fill_inodes(self) -> None:
        """Take every file left (a new folder fails with ENOSPC, files keep their bytes)."""
        folder = self.path / f"inodes-{len(self.fillers)}"
        folder.mkdir()
        self.fillers.append(folder)
        with pytest.raises(OSError) as full:
            for i in range(1000):
                (folder / str(i)).touch()
        assert full.value.errno == errno.ENOSPC

    def free(self) -> None:
        for f in self.fillers:
            subprocess.run(["rm", "-rf", str(f)], check=True)
        self.fillers.clear()


def mount(path: Path, options: str) -> None:
    """Mount a tmpfs with ``options`` at ``path``; skip the test where that is impossible."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    path.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")


def unmount(path: Path) -> None:
    """Unmount ``path`` (lazily when a process still holds a file there)."""
    if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)
