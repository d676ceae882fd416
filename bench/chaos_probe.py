"""What a gateway answers to reads while the chaos goes on, Cassandra outages included.

Every ``PROBE_EVERY_S`` each gateway gets one read of a rotation (conversation list, one
conversation, usage, memory). An answer is fine when it is a 2xx, or a 503 whose body is the JSON
error of a backing service away; a gateway that is down refuses the connection (also fine: the
client fails over). A 500, a 503 without the JSON error, or no answer within ``PROBE_TIMEOUT_S``
(the clients' patience) is a failure the bench counts.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import datetime, timezone

import httpx

PROBE_EVERY_S = 2.0
PROBE_TIMEOUT_S = 30.0
#: Outcomes that break the invariant.
BAD = ("error status", "503 without a JSON error", "no answer in time")


def outcome(response: httpx.Response) -> str:
    if response.status_code < 300:
        return "2xx"
    if response.status_code == 503:
        try:
            body = response.json()
        except ValueError:
            return "503 without a JSON error"
        return "503 JSON" if isinstance(body, dict) and "error" in body else "503 without a JSON error"
    if response.status_code == 429:
        return "429"
    return "error status"


class Probe:
    def __init__(self, urls: list[str], key: str) -> None:
        headers = {"Authorization": f"Bearer {key}"}
        timeout = httpx.Timeout(PROBE_TIMEOUT_S, connect=5)
        self.http = [httpx.AsyncClient(base_url=u, headers=headers, timeout=timeout) for u in urls]
        self.seen: Counter[str] = Counter()
        self.bad: list[str] = []  # "gateway path: outcome (status)" of the failures, for the post-mortem

    async def run(self, stop: asyncio.Event, cid: str) -> None:
        paths = ["/v1/conversations", f"/v1/conversations/{cid}", "/v1/usage", "/v1/memory"]
        n = 0
        try:
            while not stop.is_set():
                path = paths[n % len(paths)]
                await asyncio.gather(*(self._one(i, path) for i in range(len(self.http))))
                n += 1
                try:
                    await asyncio.wait_for(stop.wait(), PROBE_EVERY_S)
                except asyncio.TimeoutError:
                    pass
        finally:
            for h in self.http:
                await h.aclose()

    async def _one(self, gateway: int, path: str) -> None:
        asked = datetime.now(timezone.utc).strftime("%H:%M:%S")  # to find it in the gateways' logs
        try:
            response = await self.http[gateway].get(path)
            found, status = outcome(response), str(response.status_code)
        except httpx.ConnectError:
            found, status = "refused (gateway down)", "-"
        except httpx.TimeoutException:
            found, status = "no answer in time", "-"
        except httpx.HTTPError as exc:  # a connection cut by a gateway's SIGKILL
            found, status = "cut (gateway down)", type(exc).__name__
        self.seen[found] += 1
        if found in BAD:
            self.bad.append(f"gateway {gateway + 1} {path.split('/')[2]} asked at {asked}: {found} ({status})")

    @property
    def failures(self) -> int:
        return sum(self.seen[b] for b in BAD)
