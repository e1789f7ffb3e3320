"""Parley's /mcp through the Python MCP SDK's client (`mcp`, pinned in
tests/interop/requirements.txt): connects over Streamable HTTP in one MCP revision, lists the
tools, makes the calls it is given, and prints what it saw as one JSON object on stdout, for the
Rust test that runs it (tests/tests/e2e/mcp_server.rs) to check.

Usage: parley_client.py URL --mode {legacy|2026-07-28} [--call NAME JSON]... [--unknown NAME]

`--mode legacy` speaks the revision before the current one (the `initialize` handshake);
`2026-07-28` the current one (no handshake). Each `--call` is one tools/call, its arguments as
JSON; `--unknown` calls a tool the server does not have and reports the JSON-RPC error.
"""

import argparse
import asyncio
import json
import sys

from mcp import Client
from mcp.shared.exceptions import MCPError


def dump(model):
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


async def run(args):
    report = {"calls": []}
    async with Client(args.url, mode=args.mode) as client:
        report["protocolVersion"] = client.protocol_version
        # `refresh`: the listing Parley gives is fresh each time (ttlMs 0); ask it again.
        listed = await client.list_tools(cache_mode="refresh")
        report["tools"] = [dump(tool) for tool in listed.tools]
        for name, arguments in args.call:
            result = await client.call_tool(name, json.loads(arguments))
            report["calls"].append({"name": name, "result": dump(result)})
        if args.unknown:
            try:
                await client.call_tool(args.unknown, {})
                report["unknown"] = {"error": None}
            except MCPError as e:
                report["unknown"] = {"code": e.code, "message": e.message}
    return report


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--mode", required=True)
    parser.add_argument("--call", nargs=2, action="append", default=[], metavar=("NAME", "JSON"))
    parser.add_argument("--unknown")
    report = asyncio.run(run(parser.parse_args()))
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    main()
