"""The official MCP SDK's own client (``mcp.Client``) driving ``rl-insight mcp``: over stdio (the
SDK starts the command, as an agent does) and over streamable HTTP (a running ``rl-insight mcp
--http``, each request with its own ``Authorization`` header). Each helper opens one session and
makes the calls in it, in order."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client


@dataclass
class Called:
    error: bool
    text: str  # the first text content: the JSON answer, or the tool error's message
    data: dict | None  # the structured answer (None for an error)

    @property
    def size(self) -> int:
        """The answer's bytes as the byte cap counts them (compact JSON)."""
        return len(json.dumps(self.data, separators=(",", ":")))


async def _session(client: Client, calls):
    out = []
    async with client:
        for name, arguments in calls:
            if name == "list_tools":
                out.append((await client.list_tools()).tools)
            elif name == "read_resource":
                out.append(await client.read_resource(arguments))
            elif name == "list_resource_templates":
                out.append((await client.list_resource_templates()).resource_templates)
            elif name == "instructions":
                out.append(client.instructions)
            else:
                result = await client.call_tool(name, arguments)
                text = result.content[0].text if result.content else ""
                out.append(Called(bool(result.is_error), text, None if result.is_error else result.structured_content))
    return out


def stdio(env, *calls, args=()):
    """``rl-insight mcp ARGS`` started by the SDK's stdio client with ``env`` added (None: removed)."""
    full = dict(os.environ)
    for key, value in env.items():
        if value is None:
            full.pop(key, None)
        else:
            full[key] = value
    params = StdioServerParameters(command=sys.executable, args=["-m", "verl_rl_insight", "mcp", *args], env=full)

    async def run():
        return await _session(Client(params), calls)

    return anyio.run(run)


def http(url, secret, *calls):
    """The SDK's streamable HTTP client at ``url``, sending ``Authorization: Bearer <secret>`` (none: None)."""

    async def run():
        headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        async with httpx2.AsyncClient(headers=headers, timeout=120) as transport:
            return await _session(Client(streamable_http_client(url, http_client=transport)), calls)

    return anyio.run(run)


def one(results):
    (result,) = results
    return result
