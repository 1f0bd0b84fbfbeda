"""Every metric Lockgate exports: its name, help text, labels and buckets, in one place.

Names follow Prometheus' conventions: the ``lockgate_`` prefix, base units in the name
(``_seconds``, ``_bytes``), ``_total`` on counters. Labels are bounded: a job's name
(``job_name``; Prometheus keeps ``job`` for the scrape job), an operator and its state
table (the plan's, a handful), a round phase, a worker or job state, a gRPC method and
status code. No window id, worker id or error text is ever a label.

>>> FAMILIES["lockgate_rounds_committed_total"].labels
('job_name',)
>>> sorted(PHASES)
['checkpoint', 'commit', 'iterate', 'plan', 'read', 'snapshot', 'stage']
"""

from __future__ import annotations

from dataclasses import dataclass

#: the label naming a job (``job`` is the scrape job's in Prometheus)
JOB = "job_name"

#: the round phases a histogram is kept for (the cycle's timings with these keys; the
#: others, such as ``write`` = snapshot + stage, overlap them)
PHASES = ("read", "plan", "iterate", "snapshot", "stage", "commit", "checkpoint")

ROUND_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
PHASE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: 1 KiB to 4 GiB, by fours
BYTES_BUCKETS = tuple(float(1024 * 4**i) for i in range(12))
GROUP_BUCKETS = (2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0)


@dataclass(frozen=True)
class Family:
    """One metric: its Prometheus type, help text and label names."""

    name: str
    kind: str  # counter | gauge | histogram
    help: str
    labels: tuple[str, ...] = ()
    #: per job or per controller (what the monitoring page lists it under)
    scope: str = "job"


_ALL = [
    # -- per job: rounds ------------------------------------------------------------
    Family("lockgate_rounds_committed_total", "counter",
           "Cycle rounds committed (a window's sinks committed and its checkpoint written).", (JOB,)),
    Family("lockgate_rounds_failed_total", "counter",
           "Cycle rounds that failed (each window of a failed catch-up group counts).", (JOB,)),
    Family("lockgate_round_duration_seconds", "histogram",
           "Seconds of a committed round, from its head to its checkpoint (a catch-up group's windows "
           "share its time).", (JOB,)),
    Family("lockgate_round_phase_seconds", "histogram",
           "Seconds of a committed round's phases: read (with the state load), plan, iterate, snapshot, "
           "stage, commit, checkpoint.", (JOB, "phase")),
    Family("lockgate_rows_in_total", "counter", "Records the job's rounds read from its sources.", (JOB,)),
    Family("lockgate_rows_out_total", "counter", "Records the job's rounds committed to its sinks.", (JOB,)),
    Family("lockgate_rows_late_total", "counter", "Records that arrived behind the watermark.", (JOB,)),
    Family("lockgate_rows_invalid_total", "counter",
           "Records dropped as invalid (Pipeline(invalid='skip')).", (JOB,)),
    Family("lockgate_cycle_window_seconds", "gauge",
           "Seconds of event time one cycle window of the job holds (what its rounds' pace compares with).",
           (JOB,)),
    Family("lockgate_last_window", "gauge", "The job's last committed cycle window (its id).", (JOB,)),
    Family("lockgate_last_commit_timestamp_seconds", "gauge",
           "When the job's last window was committed (Unix time).", (JOB,)),
    Family("lockgate_last_commit_age_seconds", "gauge",
           "Seconds since the job's last window was committed, at scrape time.", (JOB,)),
    Family("lockgate_watermark_timestamp_seconds", "gauge",
           "The job's event-time watermark after its last committed window (Unix time): the window's end "
           "less the allowed lateness.", (JOB,)),
    Family("lockgate_event_time_lag_seconds", "gauge",
           "Now minus the job's watermark, at scrape time: how far event time lags behind the clock.", (JOB,)),
    Family("lockgate_state_rows", "gauge",
           "Rows of a stateful operator's state table at the last checkpoint (its layers' rows: an upper "
           "bound of the live rows).", (JOB, "operator", "table")),
    Family("lockgate_state_bytes", "gauge",
           "Bytes of snapshot files a restore of a state table reads at the last checkpoint.",
           (JOB, "operator", "table")),
    Family("lockgate_checkpoint_written_bytes", "histogram",
           "Bytes of state snapshot files a round wrote (its delta or new base).", (JOB,)),
    Family("lockgate_restores_total", "counter",
           "Runs that restored the job's state from a checkpoint: reason=resume (a new run), recovery "
           "(after a failure or a lost worker), rollback (a restore to a chosen window).", (JOB, "reason")),
    Family("lockgate_catchup_groups_total", "counter",
           "Catch-up groups run (several windows computed in one go).", (JOB,)),
    Family("lockgate_catchup_group_windows", "histogram", "Windows per catch-up group.", (JOB,)),
    Family("lockgate_job_state", "gauge",
           "1 for the state the job is in, 0 for the other states (CREATED ... FAILED); a controller reads "
           "every job of its catalog at each scrape.",
           (JOB, "state")),
    # -- per controller ---------------------------------------------------------------
    Family("lockgate_workers", "gauge", "Worker processes by state (STARTING, IDLE, BUSY, LOST, CLOSED).",
           ("state",), "controller"),
    Family("lockgate_fenced_runs_total", "counter",
           "Runs that found another run had taken their job over (fenced) and stopped without writing.",
           (), "controller"),
    Family("lockgate_adopted_orphans_total", "counter",
           "Workers of a previous controller adopted by this one.", (), "controller"),
    Family("lockgate_heartbeats_missed_total", "counter",
           "Workers lost for missing the heartbeat deadline.", (), "controller"),
    Family("lockgate_grpc_requests_total", "counter",
           "gRPC requests handled, by service, method and status code.", ("service", "method", "code"),
           "controller"),
]

#: every family by name, in the order the monitoring page lists them
FAMILIES: dict[str, Family] = {f.name: f for f in _ALL}

__all__ = ["BYTES_BUCKETS", "FAMILIES", "GROUP_BUCKETS", "JOB", "PHASES", "PHASE_BUCKETS", "ROUND_BUCKETS",
           "Family"]
