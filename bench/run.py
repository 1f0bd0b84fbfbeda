"""The benchmark, in one command::

    python -m bench.run --size small --reps 3      # ~1M events
    python -m bench.run --size full --reps 3       # 10M events
    python -m bench.run --size tiny --check-only   # the smoke run of the test command

Lockgate, Spark Structured Streaming (default and RocksDB state store) and one plain
PySpark batch job run the same seven Nexmark workloads over the same Parquet files, each
run in its own process (a fresh JVM; local[2], the same driver memory and shuffle
partitions for all), interleaved (c a b b' c a b b' ...), a warm-up round discarded.
Every run's output is checked against the batch job's before any speed is kept; a
mismatch fails the run. A query Structured Streaming refuses (its AnalysisException) is
recorded as not supported, with Spark's reason, instead of a figure. Results go to
``bench/results/``: ``results.json`` (every run), ``results.md`` (the tables) and
``chart.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from . import jvm_profile, report
from .config import (
    CONTENDERS,
    REPO,
    RESULTS,
    SIZES,
    SPARK_DEFAULTS,
    START,
    STREAMING,
    Size,
)
from .data import ensure_data, subset
from .procmon import run_tree
from .provenance import engine_version
from .verify import Mismatch, canonical, compare, read_output
from .workloads import PIPELINE_FILE, WORKLOADS


class BenchError(RuntimeError):
    pass


def log(msg: str) -> None:
    print(f"[bench {datetime.now().strftime('%H:%M:%S')}] {msg}", flush=True)


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
    }


def spark_conf_dir(work: Path) -> Path:
    d = work / "spark-conf"
    d.mkdir(parents=True, exist_ok=True)
    (d / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in SPARK_DEFAULTS.items()))
    return d


def child_env(work: Path, catchup: str = "off") -> dict[str, str]:
    env = dict(os.environ)
    # One window per round, as every table here says: the default ("auto") would run a plan that a
    # catch-up group computes in one pass (W0, W1, W3, W4) as groups of many windows, against
    # Structured Streaming's one file per micro-batch (bench.backfill measures the groups)
    env["LOCKGATE_CATCHUP"] = catchup
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["SPARK_CONF_DIR"] = str(spark_conf_dir(work))
    env.pop("LOCKGATE_FAULT", None)
    env.pop("LOCKGATE_HOME", None)
    env.setdefault("PYTHONWARNINGS", "ignore")
    return env


def _tail(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


class Bench:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.size: Size = SIZES[args.size]
        self.work = Path(args.work).resolve()
        self.out = Path(args.out).resolve()
        self.env = child_env(self.work, args.catchup)
        self.cuts = tuple(args.cuts) if args.cuts else self.size.cuts
        self.finest = max(self.cuts)
        if any(self.size.windows % c for c in self.cuts):
            raise BenchError(f"cuts {self.cuts} must divide the {self.size.windows} windows of size {self.size.name}")
        self.workloads = args.workloads
        self.contenders = [c for c in CONTENDERS if c in args.contenders]
        self.runs: list[dict[str, Any]] = []
        self.restores: list[dict[str, Any]] = []
        self.profiles: dict[str, Any] = {}
        self.refs: dict[str, Any] = {}
        self.data: dict[str, Any] = {}
        self.started = datetime.now(UTC)
        self.machine = machine()
        self.failures: list[dict[str, Any]] = []
        #: workload -> contender -> Spark's reason for refusing the query
        self.unsupported: dict[str, dict[str, str]] = {}
        self.engine = engine_version()

    # -- plumbing ------------------------------------------------------------------------
    def spec(self, contender: str, workload: str, cut: int, run_dir: Path, data: dict[str, Any] | None = None,
             **extra: Any) -> dict[str, Any]:
        data = data or self.data
        windows = data["spec"]["windows"]
        return {
            "contender": contender,
            "workload": workload,
            "cut": cut,
            "data": data["root"],
            "work": str(run_dir / "work"),
            "out": str(run_dir / "out"),
            "result": str(run_dir / "result.json"),
            "job": f"{workload}_c{cut}",
            "cycle_s": windows * 10 / cut,
            "files_per_trigger": windows // cut,
            "origin": START.isoformat(),
            **extra,
        }

    def launch(self, spec: dict[str, Any], run_dir: Path, *, expect_kill: bool = False,
               wrap: list[str] | None = None, env: dict[str, str] | None = None) -> tuple[dict[str, Any] | None, Any]:
        run_dir.mkdir(parents=True, exist_ok=True)
        spec_path = run_dir / f"spec-{int(time.time() * 1000)}.json"
        spec_path.write_text(json.dumps(spec))
        Path(spec["result"]).unlink(missing_ok=True)
        cmd = [*(wrap or []), sys.executable, "-m", "bench.worker", str(spec_path)]
        fin = run_tree(cmd, env=env or self.env, cwd=REPO, log=run_dir / "log.txt", timeout_s=self.size.timeout_s)
        if fin.timed_out:
            raise BenchError(f"{spec['contender']} {spec['workload']} cut {spec['cut']} timed out after "
                             f"{self.size.timeout_s}s; log {run_dir / 'log.txt'}:\n{_tail(run_dir / 'log.txt')}")
        if expect_kill:
            if fin.returncode != -9:
                raise BenchError(f"{spec['contender']}: expected kill -9, exit {fin.returncode}; log:\n"
                                 f"{_tail(run_dir / 'log.txt')}")
            return None, fin
        if fin.returncode != 0 or not Path(spec["result"]).exists():
            raise BenchError(f"{spec['contender']} {spec['workload']} cut {spec['cut']} failed (exit "
                             f"{fin.returncode}); log {run_dir / 'log.txt'}:\n{_tail(run_dir / 'log.txt')}")
        return json.loads(Path(spec["result"]).read_text()), fin

    def events(self, workload: str, data: dict[str, Any] | None = None) -> int:
        data = data or self.data
        return sum(data["rows"][s] for s in WORKLOADS[workload].streams)

    def check(self, contender: str, workload: str, out: Path, what: str, end_us: int | None = None) -> int:
        end_us = self.data["end_us"] if end_us is None else end_us
        got = canonical(read_output(contender, out, workload), workload, end_us)
        ref = self.refs[workload]
        if end_us != self.data["end_us"]:
            ref = restrict(ref, workload, end_us)
        compare(ref, got, what)
        return got.num_rows

    # -- the throughput and fixed-cost rounds -------------------------------------------
    def rounds(self) -> None:
        warm, reps = self.args.warmup, self.args.reps
        for wl in self.workloads:
            log(f"{wl}: {WORKLOADS[wl].title}; {self.events(wl):,} input events")
            self.reference(wl)
            order = [c for c in self.contenders if c != "batch"]
            first = ["batch"] if "batch" in self.contenders else []
            for rep in range(warm + reps):
                warmup = rep < warm
                if warmup:  # every contender once, on the fewest cycles: caches warm, nothing kept
                    plan = [(c, min(self.cuts)) for c in first + order]
                else:
                    plan = [(c, self.finest) for c in first + order]
                    plan += [(c, cut) for cut in sorted(self.cuts, reverse=True)[1:] for c in order]
                for contender, cut in plan:
                    if contender not in self.unsupported.get(wl, {}):
                        self.one(wl, contender, cut, rep - warm, warmup)
                self.save()

    def reference(self, wl: str) -> None:
        run_dir = self.work / "ref" / wl
        if run_dir.exists():
            shutil.rmtree(run_dir)
        res, fin = self.launch(self.spec("batch", wl, 1, run_dir), run_dir)
        self.refs[wl] = canonical(read_output("batch", run_dir / "out", wl), wl, self.data["end_us"])
        log(f"  reference (batch): {self.refs[wl].num_rows:,} rows compared, {res['process_s']:.1f}s")

    def subset_reference(self, wl: str, sub: dict[str, Any]) -> Any:
        """The reference on the first windows ``sub`` of the data: the full reference cut at
        its end, or, for an updating result (whose current table a cut cannot give), a batch
        job of its own over ``sub``."""
        if not WORKLOADS[wl].updating:
            return restrict(self.refs[wl], wl, sub["end_us"])
        run_dir = self.work / "ref" / f"{wl}-first{sub['spec']['windows']}"
        if run_dir.exists():
            shutil.rmtree(run_dir)
        self.launch(self.spec("batch", wl, 1, run_dir, data=sub), run_dir)
        return canonical(read_output("batch", run_dir / "out", wl), wl, sub["end_us"])

    def refuse(self, wl: str, contender: str, reason: str, what: str) -> None:
        """Record that Structured Streaming refuses ``wl`` (no figure is kept for it)."""
        if contender not in self.unsupported.setdefault(wl, {}):
            log(f"  {what}: not supported by Structured Streaming: {reason}")
        self.unsupported[wl][contender] = reason

    def one(self, wl: str, contender: str, cut: int, rep: int, warmup: bool) -> dict[str, Any] | None:
        tag = f"{contender}-c{cut}-r{rep}" if not warmup else f"{contender}-c{cut}-warmup"
        run_dir = self.work / "runs" / wl / tag
        for attempt in (1, 2):  # a crashed run (not a wrong output) is retried once
            if run_dir.exists():
                shutil.rmtree(run_dir)
            try:
                res, fin = self.launch(self.spec(contender, wl, cut, run_dir), run_dir)
                break
            except BenchError as err:
                if attempt == 2:
                    raise
                log(f"  {tag}: run failed, retrying once: {str(err).splitlines()[0]}")
                self.failures.append({"workload": wl, "tag": tag, "error": str(err)[-2000:]})
        assert res is not None
        if res.get("unsupported"):
            self.refuse(wl, contender, res["unsupported"], f"{wl} {tag}")
            return None
        rows = self.check(contender, wl, run_dir / "out", f"{wl} {tag}")
        events = self.events(wl)
        rec = {
            **res,
            "rep": rep,
            "warmup": warmup,
            "events": events,
            "rows_compared": rows,
            "verified": True,
            "wall_s": fin.wall_s,
            "tree_cpu_s": fin.cpu_s,
            "peak_rss_mb": fin.peak_rss_mb,
            "throughput": events / res["process_s"],
        }
        rec.pop("per_cycle", None) if cut != self.finest else None
        self.runs.append(rec)
        log(f"  {tag:<28} {res['process_s']:7.1f}s  cpu {res['cpu_s']:6.1f}s  {rec['throughput']:>11,.0f} ev/s  "
            f"{res['cycles']:>3} cycles  start-up {res['startup_s']:.1f}s  peak {fin.peak_rss_mb:,.0f} MB  "
            f"output equal ({rows:,} rows)")
        if not self.args.keep_outputs:
            shutil.rmtree(run_dir, ignore_errors=True)
        return rec

    # -- restore after kill -9 ------------------------------------------------------------
    def restore_all(self) -> None:
        size = self.size
        for wl in self.args.restore_workloads:
            if wl not in self.refs:
                self.reference(wl)
            sub = subset(self.data, size.restore_windows, self.work / "data" / f"{size.name}-first{size.restore_windows}")
            for rep in range(max(1, min(self.args.reps, 3))):
                for contender in [c for c in STREAMING if c in self.contenders]:
                    rec = None if contender in self.unsupported.get(wl, {}) else self.restore_one(wl, contender, sub, rep)
                    if rec is None:
                        continue
                    self.restores.append(rec)
                    log(f"  restore {wl} {contender} r{rep}: first commit {rec['normal_first_commit_s']:.1f}s "
                        f"fresh, {rec['restart_first_commit_s']:.1f}s after kill -9 -> restore latency "
                        f"{rec['restore_latency_s']:+.1f}s; {rec['windows_replayed']} windows replayed; output equal")
                self.save()

    def restore_one(self, wl: str, contender: str, sub: dict[str, Any], rep: int) -> dict[str, Any] | None:
        k = self.size.kill_after
        cut = sub["spec"]["windows"]
        base = self.work / "restore" / wl / f"{contender}-r{rep}"
        if base.exists():
            shutil.rmtree(base)
        if contender == "lockgate":
            rec = self.restore_lockgate(wl, sub, base, cut, k)
        else:
            rec = self.restore_sss(wl, contender, sub, base, cut, k)
            if rec is None:
                return None
        # exactly once: the restored run's output equals the uninterrupted one's and the reference
        normal = canonical(read_output(contender, base / "normal" / "out", wl), wl, sub["end_us"])
        restored = canonical(read_output(contender, base / "killed" / "out", wl), wl, sub["end_us"])
        compare(normal, restored, f"restore {wl} {contender}: restored vs uninterrupted output")
        compare(self.subset_reference(wl, sub), normal, f"restore {wl} {contender}: vs reference")
        rec.update(workload=wl, contender=contender, rep=rep, kill_after_window=k, windows=cut,
                   rows_compared=normal.num_rows, verified=True,
                   restore_latency_s=rec["restart_first_commit_s"] - rec["normal_first_commit_s"])
        if not self.args.keep_outputs:
            shutil.rmtree(base, ignore_errors=True)
        return rec

    def _cli(self, home: Path, ref: str, last: int, log_path: Path, fault: str | None = None) -> Any:
        env = dict(self.env)
        if fault:
            env["LOCKGATE_FAULT"] = fault
        cli = str(Path(sys.executable).with_name("lockgate"))
        cmd = [cli, "--home", str(home), "run", ref, "--from-window", "0", "--to-window", str(last), "--no-progress"]
        return run_tree(cmd, env=env, cwd=REPO, log=log_path, timeout_s=self.size.timeout_s)

    @staticmethod
    def _cycles(home: Path) -> list[dict[str, Any]]:
        with sqlite3.connect(home / "catalog.db") as db:
            rows = db.execute('SELECT "window", generation, state, started, finished FROM lg_cycles').fetchall()

        def ts(t: str | None) -> float | None:
            return datetime.fromisoformat(t).replace(tzinfo=UTC).timestamp() if t else None

        return [{"window": w, "generation": g, "state": s, "started": ts(a), "finished": ts(b)}
                for w, g, s, a, b in rows]

    def restore_lockgate(self, wl: str, sub: dict[str, Any], base: Path, cut: int, k: int) -> dict[str, Any]:
        rec: dict[str, Any] = {}
        for phase in ("normal", "killed"):
            d = base / phase
            d.mkdir(parents=True)
            kwargs = {"workload": wl, "data": sub["root"], "out": str(d / "out"), "cycle_s": 10.0,
                      "origin": START.isoformat(), "name": f"{wl}_restore"}
            pipe = d / "pipeline.py"
            pipe.write_text(PIPELINE_FILE.format(repo=str(REPO), kwargs=kwargs))
            ref = f"{pipe}:pipeline"
            if phase == "normal":
                fin = self._cli(d / "home", ref, cut - 1, d / "log.txt")
                if fin.returncode != 0:
                    raise BenchError(f"lockgate normal run failed:\n{_tail(d / 'log.txt')}")
                cyc = [c for c in self._cycles(d / "home") if c["state"] == "COMMITTED"]
                rec["normal_first_commit_s"] = min(c["finished"] for c in cyc) - fin.launched_at
                rec["normal_peak_rss_mb"] = fin.peak_rss_mb
                continue
            fin = self._cli(d / "home", ref, cut - 1, d / "log.txt", fault=f"after_checkpoint:{k}")
            if fin.returncode != -9:
                raise BenchError(f"lockgate: LOCKGATE_FAULT=after_checkpoint:{k} did not kill the run "
                                 f"(exit {fin.returncode}):\n{_tail(d / 'log.txt')}")
            before = self._cycles(d / "home")
            gen_before = max(c["generation"] for c in before)
            done_before = {c["window"] for c in before if c["state"] == "COMMITTED"}
            if max(done_before) != k:
                raise BenchError(f"lockgate: killed after window {max(done_before)}, expected {k}")
            fin = self._cli(d / "home", ref, cut - 1, d / "log.txt")
            if fin.returncode != 0:
                raise BenchError(f"lockgate restart failed:\n{_tail(d / 'log.txt')}")
            after = [c for c in self._cycles(d / "home") if c["generation"] > gen_before]
            committed = [c for c in after if c["state"] == "COMMITTED"]
            rec["restart_first_commit_s"] = min(c["finished"] for c in committed) - fin.launched_at
            rec["first_new_window"] = min(c["window"] for c in committed)
            started_before = {c["window"] for c in before}
            rec["windows_replayed"] = len(started_before & {c["window"] for c in after})
            rec["restart_peak_rss_mb"] = fin.peak_rss_mb
        return rec

    def restore_sss(self, wl: str, contender: str, sub: dict[str, Any], base: Path, cut: int,
                    k: int) -> dict[str, Any] | None:
        rec: dict[str, Any] = {}
        normal = self.spec(contender, wl, cut, base / "normal", data=sub)
        res, fin = self.launch(normal, base / "normal")
        assert res is not None
        if res.get("unsupported"):
            self.refuse(wl, contender, res["unsupported"], f"restore {wl} {contender}")
            return None
        rec["normal_first_commit_s"] = res["first_commit_at"] - res["launched_at"]
        rec["normal_peak_rss_mb"] = fin.peak_rss_mb
        killed = self.spec(contender, wl, cut, base / "killed", data=sub)
        self.launch({**killed, "kill_after": k}, base / "killed", expect_kill=True)
        ckpt = Path(killed["work"]) / "checkpoint"
        ids = {d: [int(p.name) for p in (ckpt / d).iterdir() if p.name.isdigit()] for d in ("offsets", "commits")}
        last_commit, last_offset = max(ids["commits"]), max(ids["offsets"])
        if last_commit != k:
            raise BenchError(f"{contender}: killed after batch {last_commit}, expected {k}")
        res, fin = self.launch(killed, base / "killed")
        assert res is not None
        rec["restart_first_commit_s"] = res["first_commit_at"] - res["launched_at"]
        rec["first_new_window"] = res["first_batch_id"]
        rec["windows_replayed"] = max(0, last_offset - res["first_batch_id"] + 1)
        rec["restart_peak_rss_mb"] = fin.peak_rss_mb
        return rec

    # -- profile --------------------------------------------------------------------------
    def profile_all(self) -> None:
        pyspy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        pyspy = pyspy if Path(pyspy).exists() else None
        pdir = self.out / "profile"
        pdir.mkdir(parents=True, exist_ok=True)
        for wl in self.args.profile_workloads:
            run_dir = self.work / "profile" / wl
            if run_dir.exists():
                shutil.rmtree(run_dir)
            raw = pdir / f"{wl}-py-spy.txt"
            wrap = [pyspy, "record", "--idle", "--rate", "50", "--format", "raw", "-o", str(raw), "--"] if pyspy else None
            jfr = run_dir / "jvm.jfr" if shutil.which("jfr") and shutil.which("jcmd") else None
            spec = self.spec("lockgate", wl, self.finest, run_dir, profile=True, event_log=str(run_dir / "spark-events"),
                             jfr=str(jfr) if jfr else None)
            env = dict(self.env)
            if jfr is not None:  # the driver JVM's own samples (bench/jvm_profile.py)
                env["SPARK_SUBMIT_OPTS"] = f"{env.get('SPARK_SUBMIT_OPTS', '')} {jvm_profile.jfr_options()}".strip()
            res, fin = self.launch(spec, run_dir, wrap=wrap, env=env)
            assert res is not None
            self.check("lockgate", wl, run_dir / "out", f"profile {wl}")
            prof = report.profile_summary(res, raw if pyspy else None)
            if jfr is not None and jfr.exists():
                prof["jvm"] = jvm_profile.summary(jfr)
            shutil.copy(Path(res["profile"]).with_name("lockgate-profile.txt"), pdir / f"{wl}-cprofile.txt")
            self.profiles[wl] = prof
            log(f"  profile {wl}: {res['cycles']} cycles, {prof['py4j_calls_per_cycle']:.0f} Py4J calls, "
                f"{prof['spark_jobs_per_cycle']:.1f} Spark jobs and {prof.get('spark_tasks_per_cycle', 0):.1f} "
                f"tasks per cycle; see {pdir}")
            self.save()
            if not self.args.keep_outputs:
                shutil.rmtree(run_dir, ignore_errors=True)

    # -- smoke ----------------------------------------------------------------------------
    def smoke(self) -> int:
        """All workloads and contenders in ONE process (one JVM), one repetition on the
        fewest cycles, the outputs compared; no timing is reported."""
        run_dir = self.work / "smoke"
        if run_dir.exists():
            shutil.rmtree(run_dir)
        specs = []
        for wl in self.workloads:
            for contender in ["batch", *[c for c in self.contenders if c != "batch"]]:
                specs.append(self.spec(contender, wl, min(self.cuts), run_dir / wl / contender))
        self.launch({"runs": specs, "contender": "all", "workload": "all", "cut": min(self.cuts),
                     "result": str(run_dir / "done.json")}, run_dir)
        checked: list[dict[str, Any]] = []
        for spec in specs:
            wl, contender = spec["workload"], spec["contender"]
            if contender == "batch":
                self.refs[wl] = canonical(read_output("batch", spec["out"], wl), wl, self.data["end_us"])
                continue
            reason = json.loads(Path(spec["result"]).read_text()).get("unsupported")
            if reason:
                self.refuse(wl, contender, reason, f"{wl} {contender}")
                checked.append({"workload": wl, "contender": contender, "unsupported": reason})
                continue
            rows = self.check(contender, wl, Path(spec["out"]), f"smoke {wl} {contender}")
            checked.append({"workload": wl, "contender": contender, "rows": rows})
            log(f"  {wl} {contender}: output equals batch ({rows:,} rows)")
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "smoke.json").write_text(json.dumps({"size": self.size.name, "checked": checked}, indent=1))
        return 0

    # -- results --------------------------------------------------------------------------
    def save(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        doc = {
            "started": self.started.isoformat(timespec="seconds"),
            "finished": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": {**self.machine, "load_avg_end": [round(x, 2) for x in os.getloadavg()]},
            "size": {**self.size.__dict__, "events_per_second": self.size.events_per_second},
            "data": {k: v for k, v in self.data.items() if k != "spec"} | {"spec": self.data.get("spec")},
            "cuts": list(self.cuts),
            "reps": self.args.reps,
            "warmup": self.args.warmup,
            "spark": SPARK_DEFAULTS,
            "runs": self.runs,
            "restores": self.restores,
            "profiles": self.profiles,
            "failures": self.failures,
            "unsupported": self.unsupported,
            "engine": self.engine,
        }
        (self.out / "results.json").write_text(json.dumps(doc, indent=1, default=str))

    def main(self) -> int:
        log(f"size {self.size.name}: {self.size.events:,} events in {self.size.windows} windows of 10 s; "
            f"work dir {self.work}; machine {self.machine}")
        t0 = time.time()
        self.data = ensure_data(self.size, self.work)
        log(f"data ready in {time.time() - t0:.1f}s: {self.data['rows']} rows, {self.data['bytes'] / 2**20:.0f} MiB")
        if self.args.check_only:
            return self.smoke()
        self.rounds()
        if self.args.restore_workloads:
            log("restore after kill -9")
            self.restore_all()
        if self.args.profile_workloads:
            log("profile (cProfile + py-spy) of Lockgate")
            self.profile_all()
        self.save()
        report.write(self.out / "results.json", self.out)
        log(f"done in {(time.time() - t0) / 60:.1f} min: {self.out / 'results.md'}, {self.out / 'chart.png'}")
        return 0


def restrict(ref: Any, workload: str, end_us: int) -> Any:
    """The reference rows of a data set cut at ``end_us`` (its first windows)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if WORKLOADS[workload].updating:
        raise ValueError(f"{workload}: an updating result's current table on fewer windows is not a cut of "
                         "the full one (run the batch job on those windows)")
    end = pa.scalar(end_us, pa.timestamp("us", tz="UTC"))
    if workload == "w0":
        return ref.filter(pc.less(ref.column("date_time"), end))
    if WORKLOADS[workload].closed_windows_only:
        return ref.filter(pc.less(ref.column("window_end"), end))
    return ref.filter(pc.less_equal(ref.column("window_end"), end))


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--size", choices=sorted(SIZES), default="small")
    p.add_argument("--reps", type=int, default=3, help="measured repetitions (after the warm-up)")
    p.add_argument("--warmup", type=int, default=1, help="warm-up rounds, discarded")
    p.add_argument("--workloads", type=_csv, default=list(WORKLOADS))
    p.add_argument("--catchup", default="off",
                   help="Lockgate's catch-up setting (default off: one window per round, like the other contenders)")
    p.add_argument("--contenders", type=_csv, default=list(CONTENDERS))
    p.add_argument("--cuts", type=lambda s: [int(x) for x in _csv(s)], default=None,
                   help="numbers of cycles to cut the data into (default: the size's, e.g. 10,50,200)")
    p.add_argument("--restore-workloads", type=_csv, default=["w1"], help="'' to skip the kill -9 runs")
    p.add_argument("--profile-workloads", type=_csv, default=["w0", "w1", "w3"], help="'' to skip profiling")
    p.add_argument("--check-only", action="store_true",
                   help="smoke run: every workload and contender once in one process, outputs compared")
    p.add_argument("--work", default=os.environ.get("LOCKGATE_BENCH_WORK", "/tmp/lockgate-bench"),
                   help="data and scratch folder (default /tmp/lockgate-bench)")
    p.add_argument("--out", default=str(RESULTS), help="where results.md, results.json and chart.png go")
    p.add_argument("--keep-outputs", action="store_true", help="keep every run's output and checkpoints")
    p.add_argument("--report-only", action="store_true", help="rebuild results.md and chart.png from results.json")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.report_only:
        report.write(Path(args.out) / "results.json", Path(args.out))
        return 0
    unknown = [w for w in args.workloads + args.restore_workloads + args.profile_workloads if w not in WORKLOADS]
    if unknown:
        print(f"unknown workloads {unknown}; choose from {list(WORKLOADS)}", file=sys.stderr)
        return 2
    try:
        return Bench(args).main()
    except (BenchError, Mismatch) as err:
        print(f"bench: FAILED: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
