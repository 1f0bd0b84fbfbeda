"""Every Python example of the documentation site, taken from its page and run.

The ```python blocks of a page run in order in one namespace, in an empty working folder (so
relative paths such as ``out/...`` land there), with ``examples/`` of the repository beside them;
every ``lockgate.Pipeline`` a page leaves defined is then compiled by Lockgate's compiler on Spark
(operators, schemas, keys, windows: what ``lockgate compile`` checks). A block right after
``<!-- example: not run (REASON) -->`` is only compiled as Python: it needs something the tests do not
start for it (the reason says what). Two pages are run by tests of their own, which check their
results too: the graph examples (``tests/engine/graph/test_readme_graph_examples.py``) and
"Your own DAG" (``tests/docs/test_docs_your_own_dag.py``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
BLOCK = re.compile(r"(?P<marker><!-- example: not run \((?P<reason>[^)]+)\) -->\n)?```python(?P<info>[^\n]*)\n(?P<code>.*?)\n```",
                   re.DOTALL)
#: pages whose examples a test of their own runs and checks
OWN_TESTS = {
    "pipelines/graphs.md": REPO / "tests" / "engine" / "graph" / "test_readme_graph_examples.py",
    "getting-started/your-own-dag.md": REPO / "tests" / "docs" / "test_docs_your_own_dag.py",
}


def python_blocks(page: str) -> list[tuple[str, str | None]]:
    """The page's ```python blocks: (code, the reason it is not run, or None)."""
    text = (DOCS / page).read_text()
    return [(m.group("code"), m.group("reason")) for m in BLOCK.finditer(text)]


def pages_with_examples() -> list[str]:
    return sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md") if "```python" in p.read_text())


PAGES = [p for p in pages_with_examples() if p not in OWN_TESTS]


def test_every_python_block_is_found_and_run_somewhere() -> None:
    found = 0
    for page in pages_with_examples():
        text = (DOCS / page).read_text()
        assert len(python_blocks(page)) == text.count("```python"), page
        found += text.count("```python")
    assert found >= 20
    for page, test in OWN_TESTS.items():
        assert test.exists(), test
        assert page in test.read_text() or page.split("/")[-1] in test.read_text(), (page, test)
    not_run = [(page, reason) for page in PAGES for _, reason in python_blocks(page) if reason]
    assert len(not_run) <= 4, f"too many examples the tests do not run: {not_run}"


@pytest.mark.parametrize("page", PAGES)
def test_the_examples_of(page: str, spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import lockgate as lg
    from lockgate.runtime.compiler import compile_pipeline

    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples").symlink_to(REPO / "examples")
    monkeypatch.setenv("LOCKGATE_HOME", str(tmp_path / "lockgate-home"))
    monkeypatch.setenv("LOCKGATE_DEMO_OUT", str(tmp_path / "demo-out"))
    namespace: dict = {"__name__": "docs_example"}
    ran = 0
    for code, reason in python_blocks(page):
        compiled = compile(code, f"docs/{page}", "exec")
        if reason is None:
            try:
                exec(compiled, namespace)
            except Exception as err:
                pytest.fail(f"an example of docs/{page} failed: {type(err).__name__}: {err}\n--- the example:\n{code}\n"
                            "--- make it run as shown, or mark it <!-- example: not run (REASON) --> when it needs "
                            "what the tests cannot start", pytrace=False)
            ran += 1
    assert ran or all(reason for _, reason in python_blocks(page)), f"docs/{page}: no example ran"
    pipelines = [v for v in namespace.values() if isinstance(v, lg.Pipeline)]
    for pipeline in pipelines:
        plan = compile_pipeline(pipeline, spark)
        assert len(plan.version) == 16, pipeline.name
