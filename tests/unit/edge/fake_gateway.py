"""A stand-in gateway for the edge's tests: a Starlette app on uvicorn in this process.

It says which gateway served a request (``X-Gateway``), echoes the headers the
edge must pass through, streams SSE slowly, and answers 421 as a sharded
gateway does (gateway/ownership.py) for the one partition it does not own.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import uvicorn
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from tools.supervisor import free_port



def app(index: int, count: int, foreign_partition: int) -> Starlette:
    seen: list[dict[str, str]] = []
    ended: list[str] = []  # streams whose generator finished or was cancelled (the client left)

    def tagged(response: Response) -> Response:
        response.headers["X-Gateway"] = str(index)
        return response

    async def readyz(request: Request) -> Response:
        return JSONResponse({"ready": True, "shard": f"{index}/{count}"})

    async def messages(request: Request) -> Response:
        body = await request.body()
        seen.append({"path": request.url.path, "body": body.decode(), **{k: v for k, v in request.headers.items()}})
        n = int(request.query_params.get("n", "5"))
        pause = float(request.query_params.get("pause", "0.01"))

        async def events() -> AsyncIterator[dict[str, str]]:
            try:
                for i in range(n):
                    await asyncio.sleep(pause)
                    yield {"event": "delta", "id": f"3:{i}", "data": f'{{"text": "t{i}", "gateway": {index}}}'}
                yield {"event": "done", "id": f"3:{n}", "data": "{}"}
            finally:
                ended.append(request.url.path)

        return tagged(EventSourceResponse(events()))

    async def regenerate(request: Request) -> Response:
        seen.append({"path": request.url.path, **{k: v for k, v in request.headers.items()}})
        if request.headers.get("x-parley-route") == "reroute" and foreign_partition % count != index:
            return tagged(JSONResponse({"error": {"code": "misdirected", "message": "x"}}, 421, {"X-Parley-Partition": str(foreign_partition)}))
        return tagged(JSONResponse({"served_by": index}))

    async def echo(request: Request) -> Response:
        seen.append({"path": request.url.path, **{k: v for k, v in request.headers.items()}})
        return tagged(JSONResponse({"served_by": index, "body": (await request.body()).decode()}))

    routes = [
        Route("/readyz", readyz),
        Route("/v1/conversations/{cid}/messages", messages, methods=["POST"]),
        Route("/v1/messages/{mid}/stream", messages, methods=["GET"]),
        Route("/v1/messages/{mid}/regenerate", regenerate, methods=["POST"]),
        Route("/v1/{rest:path}", echo, methods=["GET", "POST"]),
    ]
    application = Starlette(routes=routes)
    application.state.seen = seen
    application.state.ended = ended
    return application


class FakeGateway:
    def __init__(self, index: int, count: int, foreign_partition: int = 0) -> None:
        self.port = free_port()
        self.app = app(index, count, foreign_partition)
        self.server = uvicorn.Server(uvicorn.Config(self.app, port=self.port, log_level="warning", lifespan="off"))
        self.task: asyncio.Task | None = None

    @property
    def seen(self) -> list[dict[str, str]]:
        return self.app.state.seen

    @property
    def ended(self) -> list[str]:
        return self.app.state.ended

    async def start(self) -> None:
        self.task = asyncio.create_task(self.server.serve())
        while not self.server.started:
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        self.server.should_exit = True
        self.server.force_exit = True
        if self.task is not None:
            with contextlib.suppress(Exception):
                await self.task
