"""Locations: local paths and file system URIs, resolved one way for every reader and writer.

Sources, the snapshot store, sink staging and sink commits all turn a location into a
``(pyarrow FileSystem, path)`` pair here, so one location means one place everywhere:

- a local path (absolute, relative to the working folder, or ``~/...``) is the local file
  system, made absolute;
- ``file:///abs/path`` and Hadoop's ``file:/abs/path`` are the local file system too;
  the path is taken literally (no percent-decoding), as Spark's Hadoop paths take it;
- ``s3a://`` and ``s3n://`` (Hadoop's spellings of S3, which Spark needs) are read as
  ``s3://``;
- any other ``scheme://`` URI goes to the pyarrow file system of that scheme (``s3://``,
  ``gs://``, ``hdfs://``, ``abfs://``...).

This module imports nothing from Lockgate and no Spark.
"""

from __future__ import annotations

import errno
import os
import time

import pyarrow.fs as pafs

#: Hadoop's names of S3 file systems; pyarrow knows S3 only as ``s3``
S3_ALIASES = ("s3a", "s3n")


def is_uri(location: str | os.PathLike[str]) -> bool:
    """True when ``location`` names a file system by scheme (``scheme://...``)."""
    return "://" in os.fspath(location)


def arrow_uri(uri: str) -> str:
    """The URI pyarrow.fs reads for file system URI ``uri``: ``s3a://`` and ``s3n://`` become
    ``s3://``; any other URI is returned as it is."""
    scheme, sep, rest = uri.partition("://")
    if sep and scheme.lower() in S3_ALIASES:
        return "s3://" + rest
    return uri


def _plain_path(location: str) -> str:
    """The absolute local path of a location without ``://`` (Hadoop's ``file:/x`` included)."""
    if location.startswith("file:"):
        return os.path.abspath(location[len("file:") :])
    return os.path.abspath(os.path.expanduser(location))


def _local_path(location: str) -> str | None:
    """The absolute local path of ``location``, or ``None`` when it names another file system."""
    if "://" not in location:
        return _plain_path(location)
    scheme, rest = location.split("://", 1)
    if scheme.lower() != "file":
        return None
    return os.path.abspath("/" + rest.lstrip("/"))


def resolve(location: str | os.PathLike[str]) -> tuple[pafs.FileSystem, str]:
    """``(file system, path inside it)`` for a local path or a file system URI."""
    location = os.fspath(location)
    local = _local_path(location)
    if local is not None:
        return pafs.LocalFileSystem(), local
    fs, path = pafs.FileSystem.from_uri(arrow_uri(location))
    return fs, path.rstrip("/") or path


def location_uri(location: str | os.PathLike[str]) -> str:
    """``location`` in the form Lockgate records and hands to Spark: a URI as given (no
    trailing slash, except the one of a bare root such as ``file:///``), any other
    location as an absolute local path."""
    location = os.fspath(location)
    if "://" in location:
        stripped = location.rstrip("/")
        return location if stripped.endswith(":") else stripped
    return _plain_path(location)


def join(base: str, *parts: str) -> str:
    """``base`` and ``parts`` joined with ``/`` (paths and URIs alike; a bare root such as
    ``/`` or ``file:///`` keeps its slashes)."""
    stripped = base.rstrip("/")
    if not parts:
        return stripped or base
    head = base if not stripped or stripped.endswith(":") else stripped + "/"
    return head + "/".join(p.strip("/") for p in parts)


def is_hidden(name: str) -> bool:
    """Spark's and Hadoop's side files and folders (``_SUCCESS``, ``_staging``, ``.crc``)."""
    return name.startswith(("_", "."))


def file_type(fs: pafs.FileSystem, path: str) -> pafs.FileType:
    """What is at ``path``: ``File``, ``Directory`` or ``NotFound``."""
    return fs.get_file_info(path).type


def exists(fs: pafs.FileSystem, path: str) -> bool:
    """True when a file or folder is at ``path``."""
    return file_type(fs, path) != pafs.FileType.NotFound


def is_dir(fs: pafs.FileSystem, path: str) -> bool:
    """True when a folder is at ``path``."""
    return file_type(fs, path) == pafs.FileType.Directory


#: pauses between tries to delete a folder that another process is still writing into
DELETE_RETRY_PAUSES_S = (0.05, 0.2, 0.5, 1.0)


def delete_path(fs: pafs.FileSystem, path: str) -> bool:
    """Delete a folder (with its contents) or a file; ``False`` when nothing was there.

    A folder another process is still writing into (a fenced run's executors finishing
    their tasks) is not empty when its last entry goes: the delete is tried again a few
    times, then the ``OSError`` is raised."""
    kind = file_type(fs, path)
    if kind == pafs.FileType.NotFound:
        return False
    for pause in DELETE_RETRY_PAUSES_S:
        try:
            return _delete(fs, path, kind)
        except OSError as err:
            if err.errno != errno.ENOTEMPTY:
                raise
        time.sleep(pause)
    return _delete(fs, path, kind)


def _delete(fs: pafs.FileSystem, path: str, kind: pafs.FileType) -> bool:
    try:
        if kind == pafs.FileType.Directory:
            fs.delete_dir(path)
        else:
            fs.delete_file(path)
    except FileNotFoundError:  # deleted concurrently
        return False
    return True


def list_dirs(fs: pafs.FileSystem, path: str) -> list[str]:
    """Names of the folders directly inside ``path`` (none when ``path`` is no folder)."""
    if not is_dir(fs, path):
        return []
    infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    return [i.base_name for i in infos if i.type == pafs.FileType.Directory]


def list_data_files(fs: pafs.FileSystem, path: str) -> list[pafs.FileInfo]:
    """The files under ``path`` (recursively, by path), skipping hidden files and anything
    inside hidden folders; ``[path]``'s own info when it is a file, none when it is missing."""
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        return []
    if info.type == pafs.FileType.File:
        return [info]
    found = fs.get_file_info(pafs.FileSelector(path, recursive=True))
    return sorted(
        (
            f
            for f in found
            if f.type == pafs.FileType.File and not any(is_hidden(p) for p in f.path[len(path) :].split("/") if p)
        ),
        key=lambda f: f.path,
    )


__all__ = [
    "S3_ALIASES",
    "arrow_uri",
    "delete_path",
    "exists",
    "file_type",
    "is_dir",
    "is_hidden",
    "is_uri",
    "join",
    "list_data_files",
    "list_dirs",
    "location_uri",
    "resolve",
]
