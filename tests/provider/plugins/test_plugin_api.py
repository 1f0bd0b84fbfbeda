"""The plugin's API on a real api-server: every route behind Airflow's auth, reading for
viewers, actions for editors, and what an action does checked through Lockgate's own client.

A real job runs first (embedded: local Spark, SQLite catalog); later a job runs through a
real ``lockgate server`` and the plugin's connection is switched to it, and to the home of a
graph job (connected components) whose rounds ran supersteps.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import quote

import pytest
from fastapi.routing import APIRoute
from loopback import wait_for

import lockgate
from lockgate_provider.plugins import views
from lockgate_provider.plugins.lockgate import LockgatePlugin

W0 = 29453760  # 2026-01-01T00:00Z in one-minute windows
JOB = "ui_api"
LAST = W0 + 3


@pytest.fixture(scope="module")
def job(api_server, write_pipeline, tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """JOB run for windows W0..W0+3 on an embedded Lockgate home the plugin reads."""
    root = tmp_path_factory.mktemp("embedded")
    home = root / "home"
    client = lockgate.connect("embedded", home=str(home))
    result = client.run(write_pipeline(root, JOB), job=JOB, first=W0, last=LAST)
    assert result.state == "FINISHED" and result.windows_run == 4
    api_server.connect(extra={"lockgate_home": str(home)})
    return SimpleNamespace(client=client, home=home, root=root, ref=write_pipeline(root, JOB))


def _routes() -> list[tuple[str, str]]:
    """Every (method, path) of the plugin's app, path parameters filled in."""
    app = LockgatePlugin.fastapi_apps[0]["app"]
    prefix = LockgatePlugin.fastapi_apps[0]["url_prefix"]
    values = {"job": JOB, "dag_id": "d", "run_id": "r", "task_id": "t", "map_index": "-1", "name": "lockgate.js"}
    out = []
    for route in app.routes:
        if not isinstance(route, APIRoute):
            continue
        path = re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], route.path)
        out += [(method, prefix + path) for method in sorted(route.methods)]
    return out


def test_the_plugin_has_the_routes_the_pages_use():
    paths = {p for _, p in _routes()}
    for expected in ("/lockgate/api/jobs", f"/lockgate/api/jobs/{JOB}/cycles", f"/lockgate/api/jobs/{JOB}/plan",
                     f"/lockgate/api/jobs/{JOB}/checkpoints", f"/lockgate/api/jobs/{JOB}/transitions",
                     f"/lockgate/api/jobs/{JOB}/restore", f"/lockgate/api/jobs/{JOB}/stop",
                     f"/lockgate/api/jobs/{JOB}/restart", f"/lockgate/api/jobs/{JOB}/supersteps", "/lockgate/ui/",
                     f"/lockgate/ui/jobs/{JOB}"):
        assert expected in paths


def test_every_route_refuses_an_anonymous_request(api_server, job):
    routes = _routes()
    assert len(routes) >= 14
    for method, path in routes:
        body = {"json": {"confirm": JOB, "window": W0}} if method == "POST" else {}
        r = api_server.request(method, path, **body)
        if "/api/" in path:
            assert r.status_code == 401, (method, path, r.status_code, r.text)
        else:  # pages and their assets send the browser to Airflow's login, and show nothing
            assert r.status_code == 303, (method, path, r.status_code)
            assert "/auth/login" in r.headers["location"]
            assert JOB not in r.text
        bad = api_server.request(method, path, headers={"Authorization": "Bearer not-a-token"}, **body)
        assert bad.status_code in (401, 403, 303), (method, path, bad.status_code)
    assert job.client.get_job(JOB).last_window == LAST  # nothing was done


def test_a_viewer_reads_everything_and_can_act_on_nothing(api_server, job):
    for method, path in _routes():
        if method == "GET" and "/api/" in path and "/task-instances/" not in path:
            r = api_server.request("GET", path, "viewer")
            assert r.status_code == 200, (path, r.text)
    jobs = api_server.request("GET", "/lockgate/api/jobs", "viewer").json()["jobs"]
    mine = next(j for j in jobs if j["name"] == JOB)
    assert mine["last_window"] == LAST and mine["state"] == "FINISHED"
    assert mine["last_window_end"] == "2026-01-01T00:04:00+00:00"
    assert mine["lag_s"] > 0 and mine["rows_per_s"] > 0
    assert api_server.request("GET", f"/lockgate/api/jobs/{JOB}", "viewer").json()["can_edit"] is False
    for action, body in (("restore", {"confirm": JOB, "window": W0}), ("stop", {"confirm": JOB}),
                         ("restart", {"confirm": JOB})):
        r = api_server.request("POST", f"/lockgate/api/jobs/{JOB}/{action}", "viewer", json=body)
        assert r.status_code == 403, (action, r.text)
    assert job.client.get_job(JOB).last_window == LAST
    assert max(c.window for c in job.client.list_checkpoints(JOB)) == LAST


def test_the_timeline_pages_through_every_round_once(api_server, job):
    seen, before = [], None
    while True:
        q = f"?limit=3&before={before}" if before is not None else "?limit=3"
        page = api_server.request("GET", f"/lockgate/api/jobs/{JOB}/cycles{q}", "viewer").json()
        seen += page["cycles"]
        before = page["next_before"]
        if before is None:
            break
    assert page["total"] == len(seen) == 4
    assert [c["window"] for c in seen] == [LAST, LAST - 1, LAST - 2, W0]
    assert {c["status"] for c in seen} == {"committed"}
    assert all(c["phases"] and c["rows_in"] > 0 for c in seen)
    assert all(c["invalid_rows"] == 0 for c in seen)  # the page's Invalid column (invalid='skip' tallies)
    plan = api_server.request("GET", f"/lockgate/api/jobs/{JOB}/plan", "viewer").json()
    assert {v["id"] for v in plan["logical"]["vertices"]} == {"bids", "totals", "files"}
    assert plan["physical"]["cycles"][0]["heads"] == ["bids"]
    assert api_server.request("GET", f"/lockgate/api/jobs/{JOB}/cycles?limit=0", "viewer").status_code == 422


def test_an_action_needs_the_jobs_name_as_confirmation(api_server, job):
    r = api_server.request("POST", f"/lockgate/api/jobs/{JOB}/restore", "editor", json={"confirm": "x", "window": W0})
    assert r.status_code == 400 and JOB in r.json()["detail"]
    r = api_server.request("POST", f"/lockgate/api/jobs/{JOB}/restore", "editor", json={"window": W0})
    assert r.status_code == 422
    assert job.client.get_job(JOB).last_window == LAST


def test_an_editors_restore_rolls_the_checkpoints_back_and_is_audited(api_server, job):
    r = api_server.request("POST", f"/lockgate/api/jobs/{JOB}/restore", "editor",
                           json={"confirm": JOB, "window": W0 + 1})
    assert r.status_code == 200, r.text
    assert r.json()["by"] == "editor" and r.json()["job"]["state"] == "STOPPED"
    # checked through Lockgate's own client, not the plugin
    assert job.client.get_job(JOB).last_window == W0 + 1
    assert [c.window for c in job.client.list_checkpoints(JOB)] == [W0, W0 + 1]
    rounds = api_server.request("GET", f"/lockgate/api/jobs/{JOB}/cycles", "viewer").json()["cycles"]
    status = {c["window"]: c["status"] for c in rounds}
    assert status == {W0: "committed", W0 + 1: "committed", W0 + 2: "rolled back", W0 + 3: "rolled back"}
    reasons = [t["reason"] for t in api_server.request("GET", f"/lockgate/api/jobs/{JOB}/transitions",
                                                          "viewer").json()["transitions"]]
    assert any(f"restored to window {W0 + 1}" in reason for reason in reasons)
    # Airflow's audit log names the user
    logs = api_server.request("GET", "/api/v2/eventLogs?event=lockgate.restore", "admin").json()["event_logs"]
    assert logs and logs[-1]["owner"] == "editor" and f'"window": {W0 + 1}' in logs[-1]["extra"]
    # a restore to a window with no checkpoint is refused, naming the problem
    r = api_server.request("POST", f"/lockgate/api/jobs/{JOB}/restore", "editor", json={"confirm": JOB, "window": 7})
    assert r.status_code == 404 and "no complete checkpoint" in r.json()["detail"]
    # the job runs on from the restored window, exactly as after an operator's restore
    again = job.client.run(job.ref, job=JOB, first=W0 + 2, last=LAST)
    assert again.windows_run == 2 and job.client.get_job(JOB).last_window == LAST


def test_restart_without_state_resets_the_keyed_state(api_server, job):
    r = api_server.request("POST", f"/lockgate/api/jobs/{JOB}/restart", "editor", json={"confirm": JOB})
    assert r.status_code == 200, r.text
    moves = job.client.list_transitions(JOB)
    assert "keyed state will be reset" in moves[-1].reason
    before = job.client.read_state(JOB, "totals", window=LAST).to_pydict()
    job.client.run(job.ref, job=JOB, first=LAST + 1, last=LAST + 1)
    after = job.client.read_state(JOB, "totals", window=LAST + 1).to_pydict()
    # one minute of bids, counted from zero: every bidder's count is below its running total
    assert sum(after["bids"]) < sum(before["bids"])
    assert sum(after["bids"]) == job.client.list_checkpoints(JOB)[-1].rows_in
    logs = api_server.request("GET", "/api/v2/eventLogs?event=lockgate.restart", "admin").json()["event_logs"]
    assert logs[-1]["owner"] == "editor"


def test_a_missing_job_and_a_missing_connection_say_what_to_do(api_server, job):
    r = api_server.request("GET", "/lockgate/api/jobs/nope", "viewer")
    assert r.status_code == 404 and "nope" in r.json()["detail"]
    r = api_server.request("GET", "/lockgate/api/task-instances/d/r/t", "viewer")
    assert r.status_code == 200 and r.json()["tries"] == []


def test_the_timeline_has_the_supersteps_of_a_graph_jobs_windows(api_server, job, graph_job, monkeypatch):
    graph = graph_job.job
    truth = graph_job.client.list_supersteps(graph)
    api_server.connect(extra={"lockgate_home": str(graph_job.home)})
    try:
        page = api_server.request("GET", f"/lockgate/api/jobs/{graph}/cycles", "viewer").json()
        rows = {c["window"]: c for c in page["cycles"]}
        assert sorted(rows) == graph_job.windows and {c["status"] for c in rows.values()} == {"committed"}
        for w, row in rows.items():
            mine = [s for s in truth if s.window == w]
            ss = row["supersteps"]
            assert ss["count"] == ss["ran"] == len(mine) >= 3 and ss["resumed"] == ss["not_checkpointed"] == 0
            assert ss["messages"] == sum(s.messages_sent for s in mine) > 0
            assert ss["halted_by"] == mine[-1].halted_by == "no_messages" and ss["operators"] == ["components"]
            assert ss["elapsed_ms"] == pytest.approx(sum(s.elapsed_ms for s in mine), abs=1)
        # one window's supersteps, in order, the last one halted
        one = api_server.request("GET", f"/lockgate/api/jobs/{graph}/supersteps?window=1", "viewer").json()
        steps = one["supersteps"]
        assert [s["superstep"] for s in steps] == list(range(len(steps))) and one["total"] == len(steps)
        assert {(s["window"], s["attempt"], s["operator"]) for s in steps} == {(1, 1, "components")}
        assert steps[1]["messages_sent"] > 0 and all(s["elapsed_ms"] > 0 for s in steps)
        assert steps[-1]["halted_by"] == "no_messages" and steps[-1]["notes"] == ["halted: no messages"]
        assert all(s["halted_by"] is None and s["notes"] == [] and s["checkpointed"] for s in steps[:-1])
        # several windows (a timeline page), one attempt, every window
        both = api_server.request("GET", f"/lockgate/api/jobs/{graph}/supersteps?window=0&window=1", "viewer").json()
        assert [(s["window"], s["superstep"]) for s in both["supersteps"]] == [(s.window, s.superstep) for s in truth]
        none = api_server.request("GET", f"/lockgate/api/jobs/{graph}/supersteps?window=1&attempt=2", "viewer").json()
        assert none["supersteps"] == []
        every = api_server.request("GET", f"/lockgate/api/jobs/{graph}/supersteps?limit=2", "viewer").json()
        assert every["total"] == len(truth) and [s["superstep"] for s in every["supersteps"]] == [2, 3]
        assert api_server.request("GET", f"/lockgate/api/jobs/{graph}/supersteps").status_code == 401
        assert api_server.request("GET", "/lockgate/api/jobs/nope/supersteps", "viewer").status_code == 404
    finally:
        api_server.connect(extra={"lockgate_home": str(job.home)})
    # a long job reads its page's supersteps window by window: the same rows
    cycles = graph_job.client.list_cycles(graph)
    at_once = views.page_supersteps(graph_job.client, graph, cycles.cycles, cycles.total)
    monkeypatch.setattr(views, "SMALL_JOB", 0)
    assert views.page_supersteps(graph_job.client, graph, cycles.cycles, cycles.total) == at_once
    assert sorted(at_once) == [(0, 1), (1, 1)]
    # a job without graph operators: no supersteps
    rounds = api_server.request("GET", f"/lockgate/api/jobs/{JOB}/cycles", "viewer").json()["cycles"]
    assert rounds and all(c["supersteps"] is None for c in rounds)
    assert api_server.request("GET", f"/lockgate/api/jobs/{JOB}/supersteps", "viewer").json()["supersteps"] == []


def _step(superstep: int, operator: str = "pr", **kw) -> lockgate.SuperstepInfo:
    fields = dict(job="j", window=5, attempt=2, operator=operator, superstep=superstep, messages_sent=10,
                  vertices_changed=3, active_vertices=7, elapsed_ms=100.0, halted_by=None, checkpointed=True,
                  resumed=False)
    return lockgate.SuperstepInfo(**{**fields, **kw})


def test_a_rounds_supersteps_summary_counts_the_resumed_and_names_each_halt():
    steps = [_step(0, resumed=True), _step(1, resumed=True), _step(2, checkpointed=False),
             _step(3, halted_by="max_supersteps"), _step(0, "cc", messages_sent=0), _step(1, "cc", halted_by="no_messages")]
    ss = views.superstep_summary(steps)
    assert ss["count"] == 6 and ss["ran"] == 4 and ss["resumed"] == 2 and ss["not_checkpointed"] == 1
    assert ss["messages"] == 50 and ss["elapsed_ms"] == 400.0 and ss["operators"] == ["pr", "cc"]
    assert ss["halts"] == {"pr": "max_supersteps", "cc": "no_messages"}
    assert ss["halted_by"] == "pr: max_supersteps, cc: no_messages"
    assert views.superstep_summary([]) is None
    assert views.superstep_summary(steps[:4])["halted_by"] == "max_supersteps"
    assert views.superstep_row(steps[0])["notes"] == ["done by an earlier attempt"]
    assert views.superstep_row(steps[2])["notes"] == ["not checkpointed"]
    assert views.superstep_row(_step(9, halted_by="no_change", resumed=True, checkpointed=False))["notes"] == [
        "halted: no change", "done by an earlier attempt", "not checkpointed"]


def test_the_plugin_reads_a_controller_through_the_connection(api_server, job, controller, write_pipeline,
                                                              tmp_path: Path):
    client = controller.client()
    ref = write_pipeline(tmp_path, "ui_served")
    assert client.run(ref, job="ui_served", first=W0, last=W0 + 2).state == "FINISHED"
    api_server.connect(host="127.0.0.1", port=controller.port, extra={"timeout": 60})
    try:
        jobs = {j["name"]: j for j in api_server.request("GET", "/lockgate/api/jobs", "viewer").json()["jobs"]}
        assert jobs["ui_served"]["last_window"] == W0 + 2 and JOB not in jobs
        rounds = api_server.request("GET", "/lockgate/api/jobs/ui_served/cycles", "viewer").json()
        assert [c["window"] for c in rounds["cycles"]] == [W0 + 2, W0 + 1, W0]
        r = api_server.request("POST", "/lockgate/api/jobs/ui_served/restore", "editor",
                               json={"confirm": "ui_served", "window": W0})
        assert r.status_code == 200, r.text
        assert client.get_job("ui_served").last_window == W0
        page = api_server.request("GET", f"/lockgate/api/jobs/{quote('ui_served')}/checkpoints", "viewer").json()
        assert [c["window"] for c in page["checkpoints"]] == [W0]
        # a continuous job: a restore is refused while it runs (409), a stop (cancel) through the page's API works
        live = client.start(write_pipeline(tmp_path, "ui_live"), job="ui_live")
        assert live.state in ("SCHEDULING", "RUNNING")
        wait_for(lambda: client.get_job("ui_live").last_window is not None, 180, "a window of the live job")
        r = api_server.request("POST", "/lockgate/api/jobs/ui_live/restore", "editor",
                               json={"confirm": "ui_live", "window": W0})
        assert r.status_code == 409 and "running" in r.json()["detail"], r.text
        r = api_server.request("POST", "/lockgate/api/jobs/ui_live/stop", "editor",
                               json={"confirm": "ui_live", "drain": False})
        assert r.status_code == 200, r.text
        assert r.json()["job"]["state"] == "STOPPED" and client.get_job("ui_live").state == "STOPPED"
        logs = api_server.request("GET", "/api/v2/eventLogs?event=lockgate.stop", "admin").json()["event_logs"]
        assert logs[-1]["owner"] == "editor" and '"drain": false' in logs[-1]["extra"]
    finally:
        api_server.connect(host=None, port=None, extra={"lockgate_home": str(job.home)})
        client.close()
