"""An MCP client on the official Python SDK, driven by the Rust tests.

It connects to `reson mcp serve` (spawned over stdio, or at --http URL) and
then reads one JSON command per line on stdin and writes one JSON answer per
line on stdout:

  {"op": "list"}                          -> {"tools": [{name, description, inputSchema}]}
  {"op": "call", "name": N, "args": {..}} -> {"isError", "text", "structured"} | {"error"}
  {"op": "wait_list_changed", "secs": S}  -> {"changed": true|false}

--elicit says how the person at this client answers an approval question:
"none" declares no elicitation support at all.
"""

import argparse
import json
import sys

import anyio
import httpx2
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client


def answer(value):
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()


async def drive(session):
    await session.initialize()
    answer({"ready": True})
    while True:
        line = await anyio.to_thread.run_sync(sys.stdin.readline)
        if not line:
            return
        command = json.loads(line)
        op = command["op"]
        if op == "list":
            listed = await session.list_tools()
            answer({"tools": [
                {"name": t.name, "description": t.description, "inputSchema": t.input_schema}
                for t in listed.tools
            ]})
        elif op == "call":
            try:
                result = await session.call_tool(command["name"], command.get("args", {}))
            except Exception as e:  # a JSON-RPC error from the server
                answer({"error": str(e)})
                continue
            text = "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))
            answer({
                "isError": bool(result.is_error),
                "text": text,
                "structured": result.structured_content,
            })
        elif op == "wait_list_changed":
            # Each wait sees only notifications that came after the last one.
            with anyio.move_on_after(command.get("secs", 10)):
                await state["list_changed"].wait()
            answer({"changed": state["list_changed"].is_set()})
            state["list_changed"] = anyio.Event()


state = {}


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", help="the server's URL; spawn the command after -- otherwise")
    parser.add_argument("--token", help="bearer token for --http")
    parser.add_argument("--elicit", choices=["none", "accept", "always", "decline"], default="none")
    parser.add_argument("server", nargs="*", help="the server command (stdio)")
    args = parser.parse_args()

    state["list_changed"] = anyio.Event()

    async def on_message(message):
        if isinstance(message, types.ToolListChangedNotification):
            state["list_changed"].set()

    async def on_elicit(context, params):
        sys.stderr.write(f"elicitation: {params.message}\n")
        if args.elicit == "decline":
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content={"always": args.elicit == "always"})

    callbacks = {"message_handler": on_message}
    if args.elicit != "none":
        callbacks["elicitation_callback"] = on_elicit

    if args.http:
        headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            async with streamable_http_client(args.http, http_client=http) as (read, write):
                async with ClientSession(read, write, **callbacks) as session:
                    await drive(session)
    else:
        server = StdioServerParameters(command=args.server[0], args=args.server[1:])
        async with stdio_client(server) as (read, write):
            async with ClientSession(read, write, **callbacks) as session:
                await drive(session)


anyio.run(main)
