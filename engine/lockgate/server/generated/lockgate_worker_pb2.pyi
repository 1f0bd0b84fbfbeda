from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WorkerHello(_message.Message):
    __slots__ = ("worker_id", "address", "slots", "pid", "spark_master", "spark_app_id", "job", "generation", "spark_version", "adopted", "pgid", "settings", "last_job", "orphaned_s")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    SPARK_MASTER_FIELD_NUMBER: _ClassVar[int]
    SPARK_APP_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    SPARK_VERSION_FIELD_NUMBER: _ClassVar[int]
    ADOPTED_FIELD_NUMBER: _ClassVar[int]
    PGID_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    LAST_JOB_FIELD_NUMBER: _ClassVar[int]
    ORPHANED_S_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    address: str
    slots: int
    pid: int
    spark_master: str
    spark_app_id: str
    job: str
    generation: int
    spark_version: str
    adopted: bool
    pgid: int
    settings: str
    last_job: str
    orphaned_s: float
    def __init__(self, worker_id: _Optional[str] = ..., address: _Optional[str] = ..., slots: _Optional[int] = ..., pid: _Optional[int] = ..., spark_master: _Optional[str] = ..., spark_app_id: _Optional[str] = ..., job: _Optional[str] = ..., generation: _Optional[int] = ..., spark_version: _Optional[str] = ..., adopted: _Optional[bool] = ..., pgid: _Optional[int] = ..., settings: _Optional[str] = ..., last_job: _Optional[str] = ..., orphaned_s: _Optional[float] = ...) -> None: ...

class WorkerTask(_message.Message):
    __slots__ = ("assign", "compile", "execute", "cancel", "shutdown", "welcome")
    ASSIGN_FIELD_NUMBER: _ClassVar[int]
    COMPILE_FIELD_NUMBER: _ClassVar[int]
    EXECUTE_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    SHUTDOWN_FIELD_NUMBER: _ClassVar[int]
    WELCOME_FIELD_NUMBER: _ClassVar[int]
    assign: Assign
    compile: Compile
    execute: ExecuteCycle
    cancel: Cancel
    shutdown: Shutdown
    welcome: Welcome
    def __init__(self, assign: _Optional[_Union[Assign, _Mapping]] = ..., compile: _Optional[_Union[Compile, _Mapping]] = ..., execute: _Optional[_Union[ExecuteCycle, _Mapping]] = ..., cancel: _Optional[_Union[Cancel, _Mapping]] = ..., shutdown: _Optional[_Union[Shutdown, _Mapping]] = ..., welcome: _Optional[_Union[Welcome, _Mapping]] = ...) -> None: ...

class Welcome(_message.Message):
    __slots__ = ("adopted",)
    ADOPTED_FIELD_NUMBER: _ClassVar[int]
    adopted: bool
    def __init__(self, adopted: _Optional[bool] = ...) -> None: ...

class Assign(_message.Message):
    __slots__ = ("request_id", "job", "pipeline")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    job: str
    pipeline: str
    def __init__(self, request_id: _Optional[int] = ..., job: _Optional[str] = ..., pipeline: _Optional[str] = ...) -> None: ...

class Compile(_message.Message):
    __slots__ = ("request_id", "pipeline")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    pipeline: str
    def __init__(self, request_id: _Optional[int] = ..., pipeline: _Optional[str] = ...) -> None: ...

class ExecuteCycle(_message.Message):
    __slots__ = ("request_id", "generation", "window", "attempt", "restore", "group_windows", "group_attempts")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    RESTORE_FIELD_NUMBER: _ClassVar[int]
    GROUP_WINDOWS_FIELD_NUMBER: _ClassVar[int]
    GROUP_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    generation: int
    window: int
    attempt: int
    restore: RestorePoint
    group_windows: _containers.RepeatedScalarFieldContainer[int]
    group_attempts: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, request_id: _Optional[int] = ..., generation: _Optional[int] = ..., window: _Optional[int] = ..., attempt: _Optional[int] = ..., restore: _Optional[_Union[RestorePoint, _Mapping]] = ..., group_windows: _Optional[_Iterable[int]] = ..., group_attempts: _Optional[_Iterable[int]] = ...) -> None: ...

class RestorePoint(_message.Message):
    __slots__ = ("window", "snapshot_uri", "snapshot_manifest_json", "positions_json")
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_URI_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_MANIFEST_JSON_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_JSON_FIELD_NUMBER: _ClassVar[int]
    window: int
    snapshot_uri: str
    snapshot_manifest_json: str
    positions_json: str
    def __init__(self, window: _Optional[int] = ..., snapshot_uri: _Optional[str] = ..., snapshot_manifest_json: _Optional[str] = ..., positions_json: _Optional[str] = ...) -> None: ...

class Cancel(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class Shutdown(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("worker_id", "generation", "status", "window")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    generation: int
    status: str
    window: int
    def __init__(self, worker_id: _Optional[str] = ..., generation: _Optional[int] = ..., status: _Optional[str] = ..., window: _Optional[int] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("interval_s",)
    INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    interval_s: float
    def __init__(self, interval_s: _Optional[float] = ...) -> None: ...

class CycleDoneRequest(_message.Message):
    __slots__ = ("worker_id", "generation", "request_id", "result_json")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    generation: int
    request_id: int
    result_json: str
    def __init__(self, worker_id: _Optional[str] = ..., generation: _Optional[int] = ..., request_id: _Optional[int] = ..., result_json: _Optional[str] = ...) -> None: ...

class CycleFailedRequest(_message.Message):
    __slots__ = ("worker_id", "generation", "request_id", "error_type", "error_code", "message", "cancelled", "deterministic")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    DETERMINISTIC_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    generation: int
    request_id: int
    error_type: str
    error_code: str
    message: str
    cancelled: bool
    deterministic: bool
    def __init__(self, worker_id: _Optional[str] = ..., generation: _Optional[int] = ..., request_id: _Optional[int] = ..., error_type: _Optional[str] = ..., error_code: _Optional[str] = ..., message: _Optional[str] = ..., cancelled: _Optional[bool] = ..., deterministic: _Optional[bool] = ...) -> None: ...

class CompileDoneRequest(_message.Message):
    __slots__ = ("worker_id", "generation", "request_id", "ok", "plan_json", "plan_version", "explain", "error_type", "error_code", "message")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    PLAN_JSON_FIELD_NUMBER: _ClassVar[int]
    PLAN_VERSION_FIELD_NUMBER: _ClassVar[int]
    EXPLAIN_FIELD_NUMBER: _ClassVar[int]
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    generation: int
    request_id: int
    ok: bool
    plan_json: str
    plan_version: str
    explain: str
    error_type: str
    error_code: str
    message: str
    def __init__(self, worker_id: _Optional[str] = ..., generation: _Optional[int] = ..., request_id: _Optional[int] = ..., ok: _Optional[bool] = ..., plan_json: _Optional[str] = ..., plan_version: _Optional[str] = ..., explain: _Optional[str] = ..., error_type: _Optional[str] = ..., error_code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class ReportAck(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
