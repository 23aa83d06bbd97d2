"""Answers, written in pieces: a slow reader holds one chunk of a response, never the whole body."""

import collections
import json

from verl_rl_insight.server.api.asgi_types import Header, Send

CHUNK_BYTES = 256 * 1024


class Writer:
    """Writes responses and counts them by status class (``"2xx"``, ``"4xx"``, ...)."""

    def __init__(self) -> None:
        self.responses: collections.Counter[str] = collections.Counter()

    async def body(
        self, send: Send, status: int, content_type: str, body: bytes, headers: list[Header] | tuple[()] = ()
    ) -> None:
        self.responses[f"{status // 100}xx"] += 1
        start = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode()), *headers]
        await send({"type": "http.response.start", "status": status, "headers": start})
        view = memoryview(body)
        for offset in range(0, max(len(body), 1), CHUNK_BYTES):
            piece = bytes(view[offset : offset + CHUNK_BYTES])
            await send({"type": "http.response.body", "body": piece, "more_body": offset + CHUNK_BYTES < len(body)})

    async def json(self, send: Send, status: int, answer: object, headers: list[Header] | tuple[()] = ()) -> None:
        """``answer`` as JSON (whatever ``json.dumps`` takes: the stores' dicts and lists)."""
        await self.body(send, status, "application/json", json.dumps(answer).encode(), headers)

    async def text(self, send: Send, body: bytes) -> None:
        await self.body(send, 200, "text/plain; charset=utf-8", body)
