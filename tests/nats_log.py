"""Publishing to a JetStream stream of a test's own: records with an event time ``ts`` (the
publish time), raw payloads, a purge, the stream's deletion; and 1 s windows to publish into."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import UTC, datetime, timedelta

import pandas as pd


async def publish_payloads(url: str, stream: str, payloads: list[tuple[str, bytes]], create: bool) -> None:
    """Publish ``(subject, payload)`` pairs in order (creating the stream on ``<stream>.>`` first)."""
    import nats

    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        if create:
            await js.add_stream(name=stream, subjects=[f"{stream}.>"])
        for subject, payload in payloads:
            await js.publish(subject, payload)
    finally:
        await nc.close()


async def _admin(url: str, stream: str, what: str) -> None:
    import nats

    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        if what == "purge":
            await js.purge_stream(stream)
        else:
            await js.delete_stream(stream)
    finally:
        await nc.close()


class Log:
    """A stream of the test's own and the records published to it."""

    def __init__(self, url: str):
        self.url = url
        self.stream = f"lg_{uuid.uuid4().hex[:12]}"
        self.records: list[dict] = []
        self.created = False

    def publish(self, n: int, bursts: int = 1, subject: str = "bids", pause: float = 0.35) -> None:
        """``n`` records in ``bursts`` bursts ``pause`` seconds apart; ``ts`` is the publish time."""
        for b in range(bursts):
            batch = []
            for _ in range(n // bursts):
                i = len(self.records)
                ts = datetime.now(UTC) - timedelta(milliseconds=i % 7)
                rec = {"id": i, "k": f"k{i % 3}", "v": i % 11, "ts": ts.isoformat().replace("+00:00", "Z")}
                self.records.append({**rec, "ts": ts})
                batch.append((f"{self.stream}.{subject}", json.dumps(rec).encode()))
            asyncio.run(publish_payloads(self.url, self.stream, batch, create=not self.created))
            self.created = True
            if b + 1 < bursts:
                time.sleep(pause)

    def raw(self, payloads: list[bytes], subject: str = "bids") -> None:
        asyncio.run(publish_payloads(self.url, self.stream, [(f"{self.stream}.{subject}", p) for p in payloads],
                             create=not self.created))
        self.created = True

    def admin(self, what: str) -> None:
        asyncio.run(_admin(self.url, self.stream, what))

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.records)


def next_window() -> int:
    """Sleep until a new 1 s window has just begun (plus 0.1 s); its id."""
    now = time.time()
    time.sleep(int(now) + 1.1 - now)
    return int(time.time())


