"""A sensor on a Lockgate job's checkpoints."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, AssetAlias, BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from lockgate import JobInfo, JobState
from lockgate_provider.assets import lockgate_asset
from lockgate_provider.hooks.lockgate import LockgateHook
from lockgate_provider.links.lockgate import LockgateJobLink
from lockgate_provider.triggers.lockgate import LockgateCheckpointTrigger
from lockgate_provider.utils import airflow_errors, checkpoint_at

if TYPE_CHECKING:
    from airflow.sdk import Context


class LockgateCheckpointSensor(BaseSensorOperator):
    """Wait until window ``window`` of a Lockgate job has a complete checkpoint.

    A window is complete only when its sink output is committed and its checkpoint row
    written, so downstream tasks see exactly that window's output and everything before it.
    The sensor works in ``poke`` and ``reschedule`` modes, or deferred
    (``deferrable=True``, :class:`~lockgate_provider.triggers.lockgate.LockgateCheckpointTrigger`).
    It **fails fast**, without retries, with the job's own error, when the job is FAILED.

    On success it returns (XCom) the checkpoint (window, its time range, rows in and out,
    plan version) and emits it as the extra of an event on each asset in ``outlets`` (through
    an :class:`~airflow.sdk.AssetAlias`, on :func:`~lockgate_provider.assets.lockgate_asset`).

    .. seealso::
        the README, "Airflow" / "LockgateCheckpointSensor".

    :param job: The Lockgate job (templated).
    :param window: The window to wait for (templated): a window id, or an instant such as
        ``"{{ data_interval_end }}"`` (ISO string or datetime), meaning the last window
        ending at or before it.
    :param pipeline: The pipeline, to map an instant to a window (default: the job's own
        pipeline reference).
    :param deferrable: Wait in the triggerer instead of a worker slot.
    :param wait_for_job: Keep waiting while the job does not exist yet (default) instead of failing.
    :param lockgate_conn_id: The Lockgate connection (``lockgate_default``).
    """

    template_fields: Sequence[str] = ("job", "window", "pipeline", "lockgate_conn_id")
    operator_extra_links = (LockgateJobLink(),)
    ui_color = "#d2b4de"

    def __init__(
        self,
        *,
        job: str,
        window: int | str | Any,
        pipeline: str | None = None,
        deferrable: bool = False,
        wait_for_job: bool = True,
        lockgate_conn_id: str = LockgateHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job = job
        self.window = window
        self.pipeline = pipeline
        self.deferrable = deferrable
        self.wait_for_job = wait_for_job
        self.lockgate_conn_id = lockgate_conn_id
        self._target: int | None = None

    @cached_property
    def hook(self) -> LockgateHook:
        """The :class:`LockgateHook` of this task's connection."""
        return LockgateHook(self.lockgate_conn_id)

    def _target_window(self, info: JobInfo | None) -> int:
        if self._target is None:
            ref = self.pipeline or (info.pipeline_ref if info is not None else None)
            self._target = self.hook.window_at(self.window, ref)
            if self._target is None:
                raise AirflowFailException("LockgateCheckpointSensor needs window= (a window id or an instant)")
        return self._target

    def _get_job(self) -> JobInfo | None:
        """The job; ``None`` while it does not exist and ``wait_for_job`` is set (else the task fails)."""
        if self.wait_for_job:
            return self.hook.get_job(self.job)
        with airflow_errors():
            return self.hook.get_conn().get_job(self.job)

    def _failed(self, error: str | None) -> AirflowFailException:
        return AirflowFailException(f"Lockgate job '{self.job}' is FAILED: {error or 'no error recorded'}")

    def poke(self, context: Context) -> bool | PokeReturnValue:
        LockgateJobLink.persist(context, self, self.hook.job_url(self.job), self.job)
        info = self._get_job()
        if info is None:
            self.log.info("Job %r does not exist yet: waiting", self.job)
            return False
        target = self._target_window(info)
        if info.last_window is not None and info.last_window >= target:
            cp = checkpoint_at(self.hook.get_conn().list_checkpoints(self.job), target) or {"window": target}
            self.log.info("Window %d of job %r is checkpointed: %s", target, self.job, cp)
            self._emit(context, cp)
            return PokeReturnValue(is_done=True, xcom_value=cp)
        if info.state == JobState.FAILED:
            raise self._failed(info.last_error)
        self.log.info(
            "Job %r is %s at window %s: waiting for window %d", self.job, info.state, info.last_window, target
        )
        return False

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        done = self.poke(context)
        if done:
            return done.xcom_value if isinstance(done, PokeReturnValue) else None
        self.defer(
            trigger=LockgateCheckpointTrigger(
                job=self.job,
                window=self._target_window(None),
                lockgate_conn_id=self.lockgate_conn_id,
                poll_interval=self.poke_interval,
                wait_for_job=self.wait_for_job,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )
        return None

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        """Resume after :class:`LockgateCheckpointTrigger` fired."""
        LockgateJobLink.persist(context, self, self.hook.job_url(self.job), self.job)
        if event.get("status") != "success":
            message = event.get("message") or "the trigger failed"
            if event.get("state") == "FAILED" or "FAILED" in message:
                raise AirflowFailException(message)
            raise AirflowException(message)
        cp = event.get("checkpoint") or {"window": event.get("window")}
        self.log.info("Window %s of job %r is checkpointed: %s", event.get("window"), self.job, cp)
        self._emit(context, cp)
        return cp

    def _emit(self, context: Context, cp: dict[str, Any]) -> None:
        extra = {"job": self.job, **cp}
        for outlet in self.outlets or ():
            if isinstance(outlet, AssetAlias):
                context["outlet_events"][outlet].add(lockgate_asset(self.job), extra=extra)
            elif isinstance(outlet, Asset):
                context["outlet_events"][outlet].extra = extra
