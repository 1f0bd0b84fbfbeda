"""Triggers that follow Lockgate jobs asynchronously, in the triggerer.

They poll the controller through :class:`lockgate.AsyncClient` (never blocking the event
loop), survive a controller that is briefly unreachable, and serialise to plain JSON values
so the triggerer (or ``dag.test()``) can rebuild them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from lockgate import AsyncClient, JobInfo, JobState, is_terminal
from lockgate.errors import JobNotFoundError
from lockgate_provider.hooks.lockgate import LockgateHook
from lockgate_provider.utils import checkpoint_at, checkpoint_dict


class _LockgateJobTrigger(BaseTrigger):
    """Shared plumbing: the client, polling with tolerance for a briefly unreachable controller."""

    def __init__(
        self,
        job: str,
        lockgate_conn_id: str = LockgateHook.default_conn_name,
        poll_interval: float = 5.0,
        max_unreachable: int = 12,
    ) -> None:
        super().__init__()
        self.job = job
        self.lockgate_conn_id = lockgate_conn_id
        self.poll_interval = float(poll_interval)
        self.max_unreachable = int(max_unreachable)

    def _common_kwargs(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "lockgate_conn_id": self.lockgate_conn_id,
            "poll_interval": self.poll_interval,
            "max_unreachable": self.max_unreachable,
        }

    async def _client(self) -> AsyncClient:
        return await LockgateHook(self.lockgate_conn_id).aget_async_conn()

    async def _poll(self, client: AsyncClient) -> AsyncIterator[JobInfo]:
        """Yield the job's :class:`lockgate.JobInfo` every ``poll_interval`` seconds; a
        controller unreachable ``max_unreachable`` polls in a row ends the trigger with an error."""
        failures = 0
        while True:
            try:
                info = await client.get_job(self.job)
                failures = 0
            except JobNotFoundError:
                raise
            except Exception as err:
                failures += 1
                if failures >= self.max_unreachable:
                    self.log.error(
                        "Lockgate job %s: Lockgate unreachable %d polls in a row: giving up", self.job, failures
                    )
                    raise
                self.log.warning(
                    "Lockgate job %s: cannot reach Lockgate (%s: %s); retrying (%d/%d)",
                    self.job, type(err).__name__, err, failures, self.max_unreachable,
                )
                await asyncio.sleep(self.poll_interval)
                continue
            yield info
            await asyncio.sleep(self.poll_interval)

    async def _stop(self, drain: bool = True) -> None:
        client = await self._client()
        try:
            info = await asyncio.wait_for(client.stop(self.job, drain=drain, timeout=25), timeout=28)
            self.log.info("Lockgate job %s stopped (%s) after window %s", self.job, info.state, info.last_window)
        finally:
            await client.close()


class LockgateRunTrigger(_LockgateJobTrigger):
    """Fires when windows ``first_window..last_window`` of ``job`` are all checkpointed, or
    when the job fails or stops short of ``last_window``.

    The event payload is a dict: ``status`` (``success``, ``error`` or ``incomplete``),
    ``job``, ``first_window``, ``last_window``, ``state``, ``last_complete`` (the job's last
    checkpointed window), ``message`` and, on success, ``checkpoints`` (the range's
    checkpoints still in the catalog, as dicts).

    :param job: The Lockgate job to follow.
    :param first_window: First cycle window of the run (inclusive).
    :param last_window: Last cycle window of the run (inclusive).
    :param lockgate_conn_id: The Lockgate connection.
    :param poll_interval: Seconds between two looks at the job.
    :param max_unreachable: Polls in a row the controller may be unreachable before the
        trigger gives up with an error.
    :param stop_on_kill: Stop the job at a window boundary (drain) when the task is killed
        by a user (mark failed / clear) while deferred.
    """

    def __init__(
        self,
        job: str,
        first_window: int,
        last_window: int,
        lockgate_conn_id: str = LockgateHook.default_conn_name,
        poll_interval: float = 5.0,
        max_unreachable: int = 12,
        stop_on_kill: bool = True,
    ) -> None:
        super().__init__(job, lockgate_conn_id, poll_interval, max_unreachable)
        self.first_window = int(first_window)
        self.last_window = int(last_window)
        self.stop_on_kill = bool(stop_on_kill)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                **self._common_kwargs(),
                "first_window": self.first_window,
                "last_window": self.last_window,
                "stop_on_kill": self.stop_on_kill,
            },
        )

    def _event(self, status: str, info: Any, message: str, **more: Any) -> TriggerEvent:
        return TriggerEvent(
            {
                "status": status,
                "job": self.job,
                "first_window": self.first_window,
                "last_window": self.last_window,
                "state": getattr(info, "state", None),
                "last_complete": getattr(info, "last_window", None),
                "message": message,
                **more,
            }
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        client = await self._client()
        try:
            seen: int | None = None
            async for info in self._poll(client):
                done = info.last_window
                if done is not None and done >= self.last_window:
                    cps = [
                        checkpoint_dict(cp)
                        for cp in await client.list_checkpoints(self.job)
                        if self.first_window <= cp.window <= self.last_window
                    ]
                    yield self._event(
                        "success", info, f"windows {self.first_window}..{self.last_window} checkpointed",
                        checkpoints=cps,
                    )
                    return
                if done != seen:
                    seen = done
                    self.log.info(
                        "Lockgate job %s is %s: last complete window %s, running to window %s",
                        self.job, info.state, done, self.last_window,
                    )
                if info.state == JobState.FAILED:
                    yield self._event("error", info, info.last_error or "the job failed with no error recorded")
                    return
                if is_terminal(info.state):
                    yield self._event(
                        "incomplete", info,
                        f"the job is {info.state} at window {done}, before window {self.last_window}",
                    )
                    return
        except Exception as err:
            yield self._event("error", None, f"following the job failed: {type(err).__name__}: {err}")
        finally:
            await client.close()

    async def on_kill(self) -> None:
        """The task was killed while deferred: stop the job cleanly at a window boundary."""
        if self.stop_on_kill:
            self.log.info("Task killed: stopping Lockgate job %s at the next window boundary", self.job)
            await self._stop(drain=True)


class LockgateCheckpointTrigger(_LockgateJobTrigger):
    """Fires when window ``window`` of ``job`` has a complete checkpoint, or at once with an
    error when the job is FAILED (with the job's error).

    Payload: ``status`` (``success`` or ``error``), ``job``, ``window``, ``state``,
    ``last_complete``, ``message`` and, on success, ``checkpoint`` (a dict; the latest
    checkpoint at or after ``window`` when that window's own row has expired).

    :param job: The Lockgate job to watch.
    :param window: The cycle window whose checkpoint is awaited.
    :param lockgate_conn_id: The Lockgate connection.
    :param poll_interval: Seconds between two looks at the job.
    :param max_unreachable: Polls in a row the controller may be unreachable before giving up.
    :param wait_for_job: Keep waiting while the job does not exist yet (else fail at once).
    """

    def __init__(
        self,
        job: str,
        window: int,
        lockgate_conn_id: str = LockgateHook.default_conn_name,
        poll_interval: float = 5.0,
        max_unreachable: int = 12,
        wait_for_job: bool = True,
    ) -> None:
        super().__init__(job, lockgate_conn_id, poll_interval, max_unreachable)
        self.window = int(window)
        self.wait_for_job = bool(wait_for_job)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {**self._common_kwargs(), "window": self.window, "wait_for_job": self.wait_for_job},
        )

    def _event(self, status: str, info: Any, message: str, **more: Any) -> TriggerEvent:
        return TriggerEvent(
            {
                "status": status,
                "job": self.job,
                "window": self.window,
                "state": getattr(info, "state", None),
                "last_complete": getattr(info, "last_window", None),
                "message": message,
                **more,
            }
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        client = await self._client()
        try:
            while True:
                try:
                    async for info in self._poll(client):
                        if info.last_window is not None and info.last_window >= self.window:
                            cp = checkpoint_at(await client.list_checkpoints(self.job), self.window)
                            yield self._event("success", info, f"window {self.window} checkpointed", checkpoint=cp)
                            return
                        if info.state == JobState.FAILED:
                            yield self._event(
                                "error", info,
                                f"Lockgate job '{self.job}' is FAILED: {info.last_error or 'no error recorded'}",
                            )
                            return
                except JobNotFoundError as err:
                    if not self.wait_for_job:
                        yield self._event("error", None, str(err))
                        return
                    await asyncio.sleep(self.poll_interval)
        except Exception as err:
            yield self._event("error", None, f"watching the job failed: {type(err).__name__}: {err}")
        finally:
            await client.close()

