"""The plugin's pages in a real browser: headless Chromium (Debian's ``chromium``, driven by
Playwright pointed at it) on a real api-server, after a real run of the example DAG
``lockgate_failure_demo`` (a try fails in window 4, its retry resumes there) on the embedded
engine, after a job run through a real ``lockgate server``, and for a graph job whose rounds ran
supersteps.

Each test writes a screenshot under ``test-output/screenshots`` (``$LOCKGATE_TEST_OUTPUT``).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import quote, urlsplit

import pytest

import lockgate

W0 = 29453760  # the demo's first window: 2026-01-01T00:00Z in one-minute windows
JOB = "failure_demo"
DAG_ID = "lockgate_failure_demo"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-sync",
                 "--disable-background-networking", "--disable-component-update"]


def _chromium() -> str:
    path = os.environ.get("LOCKGATE_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.fail("Debian's chromium is not installed: `make setup` installs it when run as root; otherwise "
                    "`sudo apt-get install chromium` (or set LOCKGATE_CHROMIUM to a Chromium binary)", pytrace=False)
    return path


def _run_demo_dag(repo: Path) -> object:
    from airflow.sdk import DAG

    spec = importlib.util.spec_from_file_location("lockgate_ui_demo_dag", repo / "dags" / f"{DAG_ID}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    dag = next(v for v in vars(module).values() if isinstance(v, DAG) and v.dag_id == DAG_ID)
    return dag.test()


@pytest.fixture(scope="module")
def demo(api_server, helpers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    """The failure demo run through ``dag.test()`` on an embedded home the plugin reads."""
    root = tmp_path_factory.mktemp("demo")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOCKGATE_HOME", str(root / "home"))
        mp.setenv("LOCKGATE_EXAMPLES_OUT", str(root / "out"))
        mp.delenv("AIRFLOW_CONN_LOCKGATE_DEFAULT", raising=False)
        run = _run_demo_dag(helpers.REPO)
        assert str(run.state) == "success"
        tries = {ti.task_id: ti.try_number for ti in run.get_task_instances()}
        assert tries["run_windows"] == 2  # the first try failed, the retry resumed
        client = lockgate.connect("embedded", home=str(root / "home"))
        api_server.connect(extra={"lockgate_home": str(root / "home")})
        yield SimpleNamespace(run_id=run.run_id, client=client, home=root / "home")


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=_chromium(), args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def _login(browser, api_server, user: str) -> object:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(30_000)
    page.goto(f"{api_server.base}/auth/login")
    page.locator("input[name=username]").fill(user)
    page.locator("input[name=password]").fill(api_server.password(user))
    page.locator("button[type=submit]").click()
    page.wait_for_url(lambda url: "/auth/login" not in url)
    return page


@pytest.fixture(scope="module")
def editor(browser, api_server, demo) -> Iterator[object]:
    page = _login(browser, api_server, "editor")
    yield page
    page.close()


def _frame(page):
    return page.frame_locator("iframe")


def _statuses(frame, table: str = "#timeline") -> dict[int, list[str]]:
    rows = frame.locator(f"{table} > tbody > tr[data-status]")  # not a round's supersteps, shown below it
    rows.first.wait_for()
    out: dict[int, list[str]] = {}
    for row in rows.all():
        out.setdefault(int(row.get_attribute("data-window")), []).append(row.get_attribute("data-status"))
    return out


def test_the_job_page_shows_the_committed_and_failed_windows_of_the_run(editor, api_server, demo, screenshots):
    editor.goto(f"{api_server.base}/plugin/lockgate")
    jobs = _frame(editor)
    jobs.locator(f"#jobs tr[data-job='{JOB}']").wait_for()
    assert "finished" in jobs.locator(f"#jobs tr[data-job='{JOB}']").inner_text()
    editor.screenshot(path=str(screenshots / "lockgate-jobs.png"))
    jobs.locator(f"#jobs tr[data-job='{JOB}'] a").click()
    frame = _frame(editor)
    statuses = _statuses(frame)
    committed = {c.window for c in demo.client.list_checkpoints(JOB)}
    assert committed == set(range(W0, W0 + 5))
    assert {w for w, s in statuses.items() if "committed" in s} == committed
    assert statuses[W0 + 3] == ["committed", "failed"]  # newest first: the retry's round, then the failed one
    assert "Supersteps" not in frame.locator("#timeline thead").inner_text()  # no graph operator
    assert "/plugin/lockgate/lockgate/ui/jobs/failure_demo" in editor.url  # Airflow's URL follows the page
    editor.screenshot(path=str(screenshots / "lockgate-job-timeline.png"), full_page=True)


def test_the_plan_graph_renders_both_plans(editor, api_server, demo, screenshots):
    editor.goto(f"{api_server.base}/plugin/lockgate/lockgate/ui/jobs/{JOB}")
    frame = _frame(editor)
    frame.locator("button[data-tab=Plan]").click()
    plan = demo.client.get_plan(JOB)
    frame.locator("#logical-plan g.node").first.wait_for()
    drawn = {n.get_attribute("data-operator") for n in frame.locator("#logical-plan g.node").all()}
    assert drawn == {v["id"] for v in plan.logical["vertices"]}
    assert frame.locator("#logical-plan path.edge").count() == len(plan.logical["edges"])
    assert frame.locator("#physical-plan .chain").count() == len(plan.physical["chains"])
    box = frame.locator("#logical-plan").bounding_box()
    assert box is not None and box["width"] > 400 and box["height"] > 50
    editor.screenshot(path=str(screenshots / "lockgate-job-plan.png"))


def test_the_timeline_shows_the_supersteps_of_a_graph_jobs_window(editor, api_server, demo, graph_job, screenshots):
    steps = [s for s in graph_job.client.list_supersteps(graph_job.job) if s.window == 1]
    api_server.connect(extra={"lockgate_home": str(graph_job.home)})
    try:
        editor.goto(f"{api_server.base}/plugin/lockgate/lockgate/ui/jobs/{graph_job.job}")
        frame = _frame(editor)
        assert _statuses(frame) == {0: ["committed"], 1: ["committed"]}
        assert "Supersteps" in frame.locator("#timeline thead").inner_text()
        cell = frame.locator("#timeline > tbody > tr[data-window='1'] td.ss-cell")
        line = cell.inner_text()
        assert f"{len(steps)} supersteps" in line and "halted: no messages" in line, line
        assert f"{sum(s.messages_sent for s in steps):,} messages" in line, line
        cell.locator("button.ss-toggle").click()
        table = frame.locator("#supersteps-1-1")
        rows = table.locator("tbody tr")
        rows.first.wait_for()
        assert rows.count() == len(steps)
        for s, texts in zip(steps, (r.locator("td").all_inner_texts() for r in rows.all()), strict=True):
            assert texts[:4] == ["components", str(s.superstep), f"{s.messages_sent:,}", f"{s.vertices_changed:,}"]
        assert "halted: no messages" in rows.last.inner_text()
        assert all("halted" not in r.inner_text() for r in rows.all()[:-1])
        # a bar per superstep: the slowest one's time and the busiest one's messages fill theirs
        slowest = max(steps, key=lambda s: s.elapsed_ms).superstep
        busiest = max(steps, key=lambda s: s.messages_sent).superstep
        assert table.locator(f"tr[data-superstep='{slowest}'] .ss-ms").bounding_box()["width"] == pytest.approx(120, abs=1)
        assert table.locator(f"tr[data-superstep='{busiest}'] .ss-msg").bounding_box()["width"] == pytest.approx(120, abs=1)
        assert table.locator("tr[data-superstep='0'] .ss-msg").bounding_box()["width"] <= 2  # superstep 0 sends none
        editor.screenshot(path=str(screenshots / "lockgate-job-supersteps.png"), full_page=True)
        cell.locator("button.ss-toggle").click()  # folds it again
        assert table.is_hidden()
        frame.locator("button[data-tab=Plan]").click()
        assert "supersteps of components in every round of cycle_1 until no messages" in frame.locator(
            "#physical-plan").inner_text()
    finally:
        api_server.connect(extra={"lockgate_home": str(demo.home)})


def test_the_task_instance_view_shows_the_failed_try_and_the_resumed_retry(editor, api_server, demo, screenshots):
    editor.goto(f"{api_server.base}/dags/{DAG_ID}/runs/{quote(demo.run_id)}/tasks/run_windows/plugin/lockgate-windows")
    frame = _frame(editor)
    frame.locator(".try").nth(1).wait_for()
    first, retry = frame.locator(".try[data-try='1']"), frame.locator(".try[data-try='2']")
    assert f"stopped at window {W0 + 3}: it failed" in first.locator(".story").inner_text()
    assert f"committed up to window {W0 + 2}" in first.locator(".story").inner_text()
    assert "simulated crash" in first.inner_text()
    assert f"resumed at window {W0 + 3}" in retry.locator(".story").inner_text()
    assert f"committed up to window {W0 + 4}" in retry.locator(".story").inner_text()
    assert _statuses(frame, "#rounds-2") == {W0 + 3: ["committed"], W0 + 4: ["committed"]}
    editor.screenshot(path=str(screenshots / "lockgate-task-tries.png"), full_page=True)


def test_the_lockgate_job_link_opens_the_job_page(editor, api_server, demo):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        link = session.execute(select(XComModel.value).where(
            XComModel.dag_id == DAG_ID, XComModel.run_id == demo.run_id, XComModel.task_id == "run_windows",
            XComModel.key == "_link_LockgateJobLink")).scalar()
    link = link.strip('"') if isinstance(link, str) else link
    assert urlsplit(link).path == f"/plugin/lockgate/lockgate/ui/jobs/{JOB}", link
    editor.goto(f"{api_server.base}{urlsplit(link).path}")
    assert _statuses(_frame(editor))[W0 + 4] == ["committed"]


def test_a_viewer_sees_the_job_and_no_actions(browser, api_server, demo):
    page = _login(browser, api_server, "viewer")
    try:
        page.goto(f"{api_server.base}/plugin/lockgate/lockgate/ui/jobs/{JOB}")
        frame = _frame(page)
        frame.locator("#timeline").wait_for()
        assert frame.locator("#actions").count() == 0
        assert "Actions need edit permission" in frame.locator("main").inner_text()
    finally:
        page.close()


def test_a_restore_through_the_page_with_its_confirmation(editor, api_server, demo, screenshots):
    editor.goto(f"{api_server.base}/plugin/lockgate/lockgate/ui/jobs/{JOB}")
    frame = _frame(editor)
    frame.locator("#restore-window").select_option(str(W0 + 2))
    frame.locator("#action-restore").click()
    frame.locator("dialog#confirm").wait_for()
    assert frame.locator("#confirm-go").is_disabled()  # until the job's name is typed
    frame.locator("#confirm-input").fill(JOB)
    editor.screenshot(path=str(screenshots / "lockgate-restore-confirm.png"))
    assert demo.client.get_job(JOB).last_window == W0 + 4  # nothing happens before the confirmation
    frame.locator("#confirm-go").click()
    frame.locator("#notice .banner.ok").wait_for()
    assert "restore by editor" in frame.locator("#notice").inner_text()
    assert demo.client.get_job(JOB).last_window == W0 + 2
    assert [c.window for c in demo.client.list_checkpoints(JOB)] == [W0, W0 + 1, W0 + 2]
    statuses = _statuses(frame)
    assert statuses[W0 + 4] == ["rolled back"] and statuses[W0 + 2] == ["committed"]
    editor.screenshot(path=str(screenshots / "lockgate-restored.png"), full_page=True)


def test_a_job_of_a_controller(editor, api_server, demo, controller, write_pipeline, tmp_path, screenshots):
    client = controller.client()
    result = client.run(write_pipeline(tmp_path, "ui_browser_served"), job="ui_browser_served", first=W0, last=W0 + 2)
    assert result.state == "FINISHED"
    api_server.connect(host="127.0.0.1", port=controller.port, extra={"timeout": 60})
    try:
        editor.goto(f"{api_server.base}/plugin/lockgate/lockgate/ui/jobs/ui_browser_served")
        statuses = _statuses(_frame(editor))
        assert statuses == {W0: ["committed"], W0 + 1: ["committed"], W0 + 2: ["committed"]}
        editor.screenshot(path=str(screenshots / "lockgate-job-served.png"))
    finally:
        api_server.connect(host=None, port=None, extra={"lockgate_home": str(demo.home)})
        client.close()
