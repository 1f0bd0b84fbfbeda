from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CompileRequest(_message.Message):
    __slots__ = ("pipeline",)
    PIPELINE_FIELD_NUMBER: _ClassVar[int]
    pipeline: str
    def __init__(self, pipeline: _Optional[str] = ...) -> None: ...

class CompileResponse(_message.Message):
    __slots__ = ("pipeline", "plan_version", "operators", "stateful_operators", "sinks", "cycle_window_s", "explain", "plan_json")
    PIPELINE_FIELD_NUMBER: _ClassVar[int]
    PLAN_VERSION_FIELD_NUMBER: _ClassVar[int]
    OPERATORS_FIELD_NUMBER: _ClassVar[int]
    STATEFUL_OPERATORS_FIELD_NUMBER: _ClassVar[int]
    SINKS_FIELD_NUMBER: _ClassVar[int]
    CYCLE_WINDOW_S_FIELD_NUMBER: _ClassVar[int]
    EXPLAIN_FIELD_NUMBER: _ClassVar[int]
    PLAN_JSON_FIELD_NUMBER: _ClassVar[int]
    pipeline: str
    plan_version: str
    operators: _containers.RepeatedScalarFieldContainer[str]
    stateful_operators: _containers.RepeatedScalarFieldContainer[str]
    sinks: _containers.RepeatedScalarFieldContainer[str]
    cycle_window_s: float
    explain: str
    plan_json: str
    def __init__(self, pipeline: _Optional[str] = ..., plan_version: _Optional[str] = ..., operators: _Optional[_Iterable[str]] = ..., stateful_operators: _Optional[_Iterable[str]] = ..., sinks: _Optional[_Iterable[str]] = ..., cycle_window_s: _Optional[float] = ..., explain: _Optional[str] = ..., plan_json: _Optional[str] = ...) -> None: ...

class SubmitRequest(_message.Message):
    __slots__ = ("pipeline", "job", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PIPELINE_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    pipeline: str
    job: str
    labels: _containers.ScalarMap[str, str]
    def __init__(self, pipeline: _Optional[str] = ..., job: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("name", "state", "pipeline_ref", "plan_version", "generation", "last_window", "last_error", "updated_us", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_REF_FIELD_NUMBER: _ClassVar[int]
    PLAN_VERSION_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    LAST_WINDOW_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    UPDATED_US_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    name: str
    state: str
    pipeline_ref: str
    plan_version: str
    generation: int
    last_window: int
    last_error: str
    updated_us: int
    labels: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., state: _Optional[str] = ..., pipeline_ref: _Optional[str] = ..., plan_version: _Optional[str] = ..., generation: _Optional[int] = ..., last_window: _Optional[int] = ..., last_error: _Optional[str] = ..., updated_us: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class WindowsForRequest(_message.Message):
    __slots__ = ("pipeline", "start_us", "end_us")
    PIPELINE_FIELD_NUMBER: _ClassVar[int]
    START_US_FIELD_NUMBER: _ClassVar[int]
    END_US_FIELD_NUMBER: _ClassVar[int]
    pipeline: str
    start_us: int
    end_us: int
    def __init__(self, pipeline: _Optional[str] = ..., start_us: _Optional[int] = ..., end_us: _Optional[int] = ...) -> None: ...

class WindowsForResponse(_message.Message):
    __slots__ = ("first", "last")
    FIRST_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    first: int
    last: int
    def __init__(self, first: _Optional[int] = ..., last: _Optional[int] = ...) -> None: ...

class RunRequest(_message.Message):
    __slots__ = ("pipeline", "job", "first", "last", "until_caught_up", "reset_state", "spark_master", "catchup", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PIPELINE_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    FIRST_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    UNTIL_CAUGHT_UP_FIELD_NUMBER: _ClassVar[int]
    RESET_STATE_FIELD_NUMBER: _ClassVar[int]
    SPARK_MASTER_FIELD_NUMBER: _ClassVar[int]
    CATCHUP_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    pipeline: str
    job: str
    first: int
    last: int
    until_caught_up: bool
    reset_state: bool
    spark_master: str
    catchup: str
    labels: _containers.ScalarMap[str, str]
    def __init__(self, pipeline: _Optional[str] = ..., job: _Optional[str] = ..., first: _Optional[int] = ..., last: _Optional[int] = ..., until_caught_up: _Optional[bool] = ..., reset_state: _Optional[bool] = ..., spark_master: _Optional[str] = ..., catchup: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class RunUpdate(_message.Message):
    __slots__ = ("started", "event", "result")
    STARTED_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    started: Job
    event: JobEvent
    result: RunResult
    def __init__(self, started: _Optional[_Union[Job, _Mapping]] = ..., event: _Optional[_Union[JobEvent, _Mapping]] = ..., result: _Optional[_Union[RunResult, _Mapping]] = ...) -> None: ...

class RunResult(_message.Message):
    __slots__ = ("job", "first_window", "last_window", "windows_run", "windows_skipped", "rows_in", "rows_out", "late_rows", "elapsed_s", "state", "error")
    JOB_FIELD_NUMBER: _ClassVar[int]
    FIRST_WINDOW_FIELD_NUMBER: _ClassVar[int]
    LAST_WINDOW_FIELD_NUMBER: _ClassVar[int]
    WINDOWS_RUN_FIELD_NUMBER: _ClassVar[int]
    WINDOWS_SKIPPED_FIELD_NUMBER: _ClassVar[int]
    ROWS_IN_FIELD_NUMBER: _ClassVar[int]
    ROWS_OUT_FIELD_NUMBER: _ClassVar[int]
    LATE_ROWS_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_S_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    job: str
    first_window: int
    last_window: int
    windows_run: int
    windows_skipped: int
    rows_in: int
    rows_out: int
    late_rows: int
    elapsed_s: float
    state: str
    error: str
    def __init__(self, job: _Optional[str] = ..., first_window: _Optional[int] = ..., last_window: _Optional[int] = ..., windows_run: _Optional[int] = ..., windows_skipped: _Optional[int] = ..., rows_in: _Optional[int] = ..., rows_out: _Optional[int] = ..., late_rows: _Optional[int] = ..., elapsed_s: _Optional[float] = ..., state: _Optional[str] = ..., error: _Optional[str] = ...) -> None: ...

class StartRequest(_message.Message):
    __slots__ = ("pipeline", "job", "reset_state", "spark_master", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PIPELINE_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    RESET_STATE_FIELD_NUMBER: _ClassVar[int]
    SPARK_MASTER_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    pipeline: str
    job: str
    reset_state: bool
    spark_master: str
    labels: _containers.ScalarMap[str, str]
    def __init__(self, pipeline: _Optional[str] = ..., job: _Optional[str] = ..., reset_state: _Optional[bool] = ..., spark_master: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class StopRequest(_message.Message):
    __slots__ = ("job", "drain", "timeout_s")
    JOB_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    job: str
    drain: bool
    timeout_s: float
    def __init__(self, job: _Optional[str] = ..., drain: _Optional[bool] = ..., timeout_s: _Optional[float] = ...) -> None: ...

class RestoreRequest(_message.Message):
    __slots__ = ("job", "window", "reset_state")
    JOB_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    RESET_STATE_FIELD_NUMBER: _ClassVar[int]
    job: str
    window: int
    reset_state: bool
    def __init__(self, job: _Optional[str] = ..., window: _Optional[int] = ..., reset_state: _Optional[bool] = ...) -> None: ...

class JobRequest(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: str
    def __init__(self, job: _Optional[str] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ...) -> None: ...

class Checkpoint(_message.Message):
    __slots__ = ("job", "window", "window_start_us", "window_end_us", "plan_version", "rows_in", "rows_out", "status", "created_us", "snapshot_uri", "snapshot_bytes", "sink_rows")
    class SinkRowsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    JOB_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    WINDOW_START_US_FIELD_NUMBER: _ClassVar[int]
    WINDOW_END_US_FIELD_NUMBER: _ClassVar[int]
    PLAN_VERSION_FIELD_NUMBER: _ClassVar[int]
    ROWS_IN_FIELD_NUMBER: _ClassVar[int]
    ROWS_OUT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CREATED_US_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_URI_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_BYTES_FIELD_NUMBER: _ClassVar[int]
    SINK_ROWS_FIELD_NUMBER: _ClassVar[int]
    job: str
    window: int
    window_start_us: int
    window_end_us: int
    plan_version: str
    rows_in: int
    rows_out: int
    status: str
    created_us: int
    snapshot_uri: str
    snapshot_bytes: int
    sink_rows: _containers.ScalarMap[str, int]
    def __init__(self, job: _Optional[str] = ..., window: _Optional[int] = ..., window_start_us: _Optional[int] = ..., window_end_us: _Optional[int] = ..., plan_version: _Optional[str] = ..., rows_in: _Optional[int] = ..., rows_out: _Optional[int] = ..., status: _Optional[str] = ..., created_us: _Optional[int] = ..., snapshot_uri: _Optional[str] = ..., snapshot_bytes: _Optional[int] = ..., sink_rows: _Optional[_Mapping[str, int]] = ...) -> None: ...

class ListCyclesRequest(_message.Message):
    __slots__ = ("job", "limit", "before")
    JOB_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    job: str
    limit: int
    before: int
    def __init__(self, job: _Optional[str] = ..., limit: _Optional[int] = ..., before: _Optional[int] = ...) -> None: ...

class Cycle(_message.Message):
    __slots__ = ("id", "job", "window", "window_start_us", "window_end_us", "attempt", "generation", "plan_version", "state", "rows_in", "rows_out", "late_rows", "timings", "error", "started_us", "finished_us", "checkpoint", "invalid_rows")
    class TimingsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    WINDOW_START_US_FIELD_NUMBER: _ClassVar[int]
    WINDOW_END_US_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    PLAN_VERSION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ROWS_IN_FIELD_NUMBER: _ClassVar[int]
    ROWS_OUT_FIELD_NUMBER: _ClassVar[int]
    LATE_ROWS_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    STARTED_US_FIELD_NUMBER: _ClassVar[int]
    FINISHED_US_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    INVALID_ROWS_FIELD_NUMBER: _ClassVar[int]
    id: int
    job: str
    window: int
    window_start_us: int
    window_end_us: int
    attempt: int
    generation: int
    plan_version: str
    state: str
    rows_in: int
    rows_out: int
    late_rows: int
    timings: _containers.ScalarMap[str, float]
    error: str
    started_us: int
    finished_us: int
    checkpoint: str
    invalid_rows: int
    def __init__(self, id: _Optional[int] = ..., job: _Optional[str] = ..., window: _Optional[int] = ..., window_start_us: _Optional[int] = ..., window_end_us: _Optional[int] = ..., attempt: _Optional[int] = ..., generation: _Optional[int] = ..., plan_version: _Optional[str] = ..., state: _Optional[str] = ..., rows_in: _Optional[int] = ..., rows_out: _Optional[int] = ..., late_rows: _Optional[int] = ..., timings: _Optional[_Mapping[str, float]] = ..., error: _Optional[str] = ..., started_us: _Optional[int] = ..., finished_us: _Optional[int] = ..., checkpoint: _Optional[str] = ..., invalid_rows: _Optional[int] = ...) -> None: ...

class ListCyclesResponse(_message.Message):
    __slots__ = ("cycles", "total", "next_before")
    CYCLES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    NEXT_BEFORE_FIELD_NUMBER: _ClassVar[int]
    cycles: _containers.RepeatedCompositeFieldContainer[Cycle]
    total: int
    next_before: int
    def __init__(self, cycles: _Optional[_Iterable[_Union[Cycle, _Mapping]]] = ..., total: _Optional[int] = ..., next_before: _Optional[int] = ...) -> None: ...

class Transition(_message.Message):
    __slots__ = ("job", "from_state", "to_state", "reason", "at_us")
    JOB_FIELD_NUMBER: _ClassVar[int]
    FROM_STATE_FIELD_NUMBER: _ClassVar[int]
    TO_STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    AT_US_FIELD_NUMBER: _ClassVar[int]
    job: str
    from_state: str
    to_state: str
    reason: str
    at_us: int
    def __init__(self, job: _Optional[str] = ..., from_state: _Optional[str] = ..., to_state: _Optional[str] = ..., reason: _Optional[str] = ..., at_us: _Optional[int] = ...) -> None: ...

class ListTransitionsResponse(_message.Message):
    __slots__ = ("transitions",)
    TRANSITIONS_FIELD_NUMBER: _ClassVar[int]
    transitions: _containers.RepeatedCompositeFieldContainer[Transition]
    def __init__(self, transitions: _Optional[_Iterable[_Union[Transition, _Mapping]]] = ...) -> None: ...

class ListSuperstepsRequest(_message.Message):
    __slots__ = ("job", "window")
    JOB_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    job: str
    window: int
    def __init__(self, job: _Optional[str] = ..., window: _Optional[int] = ...) -> None: ...

class Superstep(_message.Message):
    __slots__ = ("job", "window", "attempt", "operator", "superstep", "messages_sent", "vertices_changed", "active_vertices", "elapsed_ms", "halted_by", "checkpointed", "resumed")
    JOB_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    SUPERSTEP_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_SENT_FIELD_NUMBER: _ClassVar[int]
    VERTICES_CHANGED_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_VERTICES_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_MS_FIELD_NUMBER: _ClassVar[int]
    HALTED_BY_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTED_FIELD_NUMBER: _ClassVar[int]
    RESUMED_FIELD_NUMBER: _ClassVar[int]
    job: str
    window: int
    attempt: int
    operator: str
    superstep: int
    messages_sent: int
    vertices_changed: int
    active_vertices: int
    elapsed_ms: float
    halted_by: str
    checkpointed: bool
    resumed: bool
    def __init__(self, job: _Optional[str] = ..., window: _Optional[int] = ..., attempt: _Optional[int] = ..., operator: _Optional[str] = ..., superstep: _Optional[int] = ..., messages_sent: _Optional[int] = ..., vertices_changed: _Optional[int] = ..., active_vertices: _Optional[int] = ..., elapsed_ms: _Optional[float] = ..., halted_by: _Optional[str] = ..., checkpointed: _Optional[bool] = ..., resumed: _Optional[bool] = ...) -> None: ...

class ListSuperstepsResponse(_message.Message):
    __slots__ = ("supersteps",)
    SUPERSTEPS_FIELD_NUMBER: _ClassVar[int]
    supersteps: _containers.RepeatedCompositeFieldContainer[Superstep]
    def __init__(self, supersteps: _Optional[_Iterable[_Union[Superstep, _Mapping]]] = ...) -> None: ...

class GetPlanRequest(_message.Message):
    __slots__ = ("job", "plan_version")
    JOB_FIELD_NUMBER: _ClassVar[int]
    PLAN_VERSION_FIELD_NUMBER: _ClassVar[int]
    job: str
    plan_version: str
    def __init__(self, job: _Optional[str] = ..., plan_version: _Optional[str] = ...) -> None: ...

class Plan(_message.Message):
    __slots__ = ("plan_version", "pipeline", "logical_json", "physical_json", "state_layout_json", "created_us")
    PLAN_VERSION_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_FIELD_NUMBER: _ClassVar[int]
    LOGICAL_JSON_FIELD_NUMBER: _ClassVar[int]
    PHYSICAL_JSON_FIELD_NUMBER: _ClassVar[int]
    STATE_LAYOUT_JSON_FIELD_NUMBER: _ClassVar[int]
    CREATED_US_FIELD_NUMBER: _ClassVar[int]
    plan_version: str
    pipeline: str
    logical_json: str
    physical_json: str
    state_layout_json: str
    created_us: int
    def __init__(self, plan_version: _Optional[str] = ..., pipeline: _Optional[str] = ..., logical_json: _Optional[str] = ..., physical_json: _Optional[str] = ..., state_layout_json: _Optional[str] = ..., created_us: _Optional[int] = ...) -> None: ...

class ListCheckpointsResponse(_message.Message):
    __slots__ = ("checkpoints",)
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    checkpoints: _containers.RepeatedCompositeFieldContainer[Checkpoint]
    def __init__(self, checkpoints: _Optional[_Iterable[_Union[Checkpoint, _Mapping]]] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("job", "timeout_s")
    JOB_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    job: str
    timeout_s: float
    def __init__(self, job: _Optional[str] = ..., timeout_s: _Optional[float] = ...) -> None: ...

class JobEvent(_message.Message):
    __slots__ = ("kind", "job", "window", "state", "rows_in", "rows_out", "late_rows", "timings", "message", "at", "total_windows")
    class TimingsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    KIND_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ROWS_IN_FIELD_NUMBER: _ClassVar[int]
    ROWS_OUT_FIELD_NUMBER: _ClassVar[int]
    LATE_ROWS_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_WINDOWS_FIELD_NUMBER: _ClassVar[int]
    kind: str
    job: str
    window: int
    state: str
    rows_in: int
    rows_out: int
    late_rows: int
    timings: _containers.ScalarMap[str, float]
    message: str
    at: float
    total_windows: int
    def __init__(self, kind: _Optional[str] = ..., job: _Optional[str] = ..., window: _Optional[int] = ..., state: _Optional[str] = ..., rows_in: _Optional[int] = ..., rows_out: _Optional[int] = ..., late_rows: _Optional[int] = ..., timings: _Optional[_Mapping[str, float]] = ..., message: _Optional[str] = ..., at: _Optional[float] = ..., total_windows: _Optional[int] = ...) -> None: ...

class ReadSinkRequest(_message.Message):
    __slots__ = ("job", "sink")
    JOB_FIELD_NUMBER: _ClassVar[int]
    SINK_FIELD_NUMBER: _ClassVar[int]
    job: str
    sink: str
    def __init__(self, job: _Optional[str] = ..., sink: _Optional[str] = ...) -> None: ...

class ReadStateRequest(_message.Message):
    __slots__ = ("job", "operator", "window", "table")
    JOB_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    job: str
    operator: str
    window: int
    table: str
    def __init__(self, job: _Optional[str] = ..., operator: _Optional[str] = ..., window: _Optional[int] = ..., table: _Optional[str] = ...) -> None: ...

class DataChunk(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class ListWorkersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Worker(_message.Message):
    __slots__ = ("id", "pid", "state", "job", "generation", "spark_master", "address", "slots", "status", "heartbeat_age_s", "lost_reason")
    ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    SPARK_MASTER_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_AGE_S_FIELD_NUMBER: _ClassVar[int]
    LOST_REASON_FIELD_NUMBER: _ClassVar[int]
    id: str
    pid: int
    state: str
    job: str
    generation: int
    spark_master: str
    address: str
    slots: int
    status: str
    heartbeat_age_s: float
    lost_reason: str
    def __init__(self, id: _Optional[str] = ..., pid: _Optional[int] = ..., state: _Optional[str] = ..., job: _Optional[str] = ..., generation: _Optional[int] = ..., spark_master: _Optional[str] = ..., address: _Optional[str] = ..., slots: _Optional[int] = ..., status: _Optional[str] = ..., heartbeat_age_s: _Optional[float] = ..., lost_reason: _Optional[str] = ...) -> None: ...

class ListWorkersResponse(_message.Message):
    __slots__ = ("workers",)
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    workers: _containers.RepeatedCompositeFieldContainer[Worker]
    def __init__(self, workers: _Optional[_Iterable[_Union[Worker, _Mapping]]] = ...) -> None: ...
