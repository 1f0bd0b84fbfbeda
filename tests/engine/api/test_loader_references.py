"""Pipeline references: what a confined policy accepts (before anything is imported, with one
message that tells nothing about files outside), and which attributes are called (a marked
pipeline factory; never an arbitrary callable such as ``os:getpid``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import lockgate as lg
from lockgate.api.loader import ReferencePolicy, is_pipeline_factory, load_pipeline, parse_reference
from lockgate.errors import PipelineLoadError, PipelineRefusedError

PIPELINE = '''
import lockgate as lg
from pathlib import Path

Path({marker!r}).write_text("imported")
pipeline = lg.Pipeline("ok")

@lg.pipeline_factory
def marked():
    return lg.Pipeline("made")

def unmarked():
    Path({marker!r} + ".called").write_text("called")
    return lg.Pipeline("unmarked")

def needs_args(n):
    return lg.Pipeline("args")

@lg.pipeline_factory
def not_a_pipeline():
    return 42

getpid = __import__("os").getpid
'''


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    allowed = tmp_path / "pipelines"
    outside = tmp_path / "elsewhere"
    allowed.mkdir()
    outside.mkdir()
    for folder in (allowed, outside):
        (folder / "pipe.py").write_text(PIPELINE.format(marker=str(folder / "imported")))
    (allowed / "escape.py").symlink_to(outside / "pipe.py")
    (allowed / "notes.txt").write_text("not python")
    return {"allowed": allowed, "outside": outside, "root": tmp_path}


def test_confined_policy_accepts_files_under_its_folders_only_and_imports_nothing_else(tree):
    allowed, outside = tree["allowed"], tree["outside"]
    policy = ReferencePolicy.of([str(allowed)], [], base=str(tree["root"]))
    assert load_pipeline(f"{allowed}/pipe.py:pipeline", policy=policy, strict=True).name == "ok"
    assert load_pipeline("pipelines/pipe.py", policy=policy, strict=True).name == "ok"  # relative to base

    refused = [
        f"{outside}/pipe.py:pipeline",  # outside
        f"{allowed}/../elsewhere/pipe.py:pipeline",  # ../ out of the folder
        f"{allowed}/escape.py:pipeline",  # a symbolic link out of the folder
        "/etc/passwd:pipeline",  # exists, not a pipeline, outside
        "/no/such/file.py:pipeline",  # does not exist, outside
        f"{allowed}/notes.txt:pipeline",  # not a .py file
        f"{allowed}:pipeline",  # the folder itself
        "os:getpid",  # a module, and no prefix is allowed
        "json:loads",
    ]
    messages = set()
    for ref in refused:
        with pytest.raises(PipelineRefusedError) as info:
            load_pipeline(ref, policy=policy, strict=True)
        messages.add(str(info.value).replace(repr(ref), "REF"))
    assert not (outside / "imported").exists()  # nothing outside was imported
    # one message for all: whether a file exists outside is not told
    assert messages == {f"pipeline reference REF refused: this controller loads only files under {allowed} "
                        "(--pipelines)"}
    assert PipelineRefusedError.code == "PERMISSION_DENIED"


def test_module_prefixes(tmp_path, monkeypatch):
    pkg = tmp_path / "mypipes"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("import lockgate as lg\npipeline = lg.Pipeline('sub')\n")
    (tmp_path / "mypipesx.py").write_text(f"open({str(tmp_path / 'x-imported')!r}, 'w').close()\n")
    (tmp_path / "raising.py").write_text("raise RuntimeError('broken at import')\n")
    (tmp_path / "exiting.py").write_text("import sys\nsys.exit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    policy = ReferencePolicy.of([], ["mypipes", "raising", "exiting."])
    assert load_pipeline("mypipes.sub", policy=policy, strict=True).name == "sub"
    for ref in ("mypipesx:pipeline", "mypipes_other:pipeline", "os:getpid", "/tmp/x.py:pipeline"):
        with pytest.raises(PipelineRefusedError, match="loads only modules mypipes or mypipes"):
            load_pipeline(ref, policy=policy, strict=True)
    assert not (tmp_path / "x-imported").exists()
    # a module that raises (or exits) on import: one clean error, the process goes on
    with pytest.raises(PipelineLoadError, match="importing module 'raising' failed: RuntimeError: broken at import"):
        load_pipeline("raising:pipeline", policy=policy, strict=True)
    with pytest.raises(PipelineLoadError, match="importing module 'exiting' failed: SystemExit: 3"):
        load_pipeline("exiting:pipeline", policy=policy, strict=True)
    for name in ("mypipes", "mypipes.sub", "raising", "exiting"):
        sys.modules.pop(name, None)


def test_only_pipelines_and_marked_factories_are_called(tree):
    path = tree["allowed"] / "pipe.py"
    called = Path(str(tree["allowed"] / "imported") + ".called")
    assert load_pipeline(f"{path}:marked", strict=True).name == "made"
    with pytest.raises(PipelineLoadError, match="not marked @lockgate.pipeline_factory.*it was not called"):
        load_pipeline(f"{path}:unmarked", strict=True)
    assert not called.exists()
    # embedded (not strict): a plain function of the pipeline's own file is still a factory
    assert load_pipeline(f"{path}:unmarked").name == "unmarked" and called.exists()
    for attr, message in (("getpid", "is a builtin_function_or_method, not a lockgate.Pipeline; it was not called"),
                          ("needs_args", "takes no arguments"),
                          ("not_a_pipeline", "returned a int, not a lockgate.Pipeline")):
        for strict in (True, False):
            if attr == "needs_args" and strict:
                continue  # not marked: refused before its signature matters
            with pytest.raises(PipelineLoadError, match=message):
                load_pipeline(f"{path}:{attr}", strict=strict)
    pid_calls = []
    os_getpid = os.getpid
    try:
        os.getpid = lambda: pid_calls.append(1) or 1  # type: ignore[assignment]
        with pytest.raises(PipelineLoadError, match="it was not called"):
            load_pipeline("os:getpid")
    finally:
        os.getpid = os_getpid  # type: ignore[assignment]
    assert pid_calls == []


def test_reference_form_is_checked_before_anything():
    for ref, message in (("", "empty"), ("   ", "empty"), ("a.py:pipe\x00line", "control or format character U\\+0000"),
                         ("pipe\nline.py", "control or format character U\\+000A"),
                         ("nel\x85.py:pipeline", "U\\+0085"), ("bidi\u202e.py:pipeline", "U\\+202E"),
                         ("x" * 5000, "characters long"),
                         ("a.py:not-a-name", "must be a Python name"), ("a b:pipeline", "neither a .py file"),
                         (":pipeline", "give path/to/file.py")):
        with pytest.raises(PipelineLoadError, match=message):
            parse_reference(ref)


def test_pipeline_factory_marks_functions_only():
    @lg.pipeline_factory
    def make() -> lg.Pipeline:
        return lg.Pipeline("m")

    assert is_pipeline_factory(make) and not is_pipeline_factory(lambda: None)
    with pytest.raises(TypeError):
        lg.pipeline_factory(lg.Pipeline)  # type: ignore[arg-type]
