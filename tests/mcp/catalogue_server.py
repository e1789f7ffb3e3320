"""An MCP server written with the Python `mcp` SDK, for Parley's tests of its `mcp` binding.

Runs on stdio (the default) or Streamable HTTP (`--http PORT`). Its tools cover what the binding
must handle: text and JSON answers, structured output with an output schema, errors reported
with `isError`, a tool that makes the server exit, a slow tool, and a tool that adds a tool and
announces it with `notifications/tools/list_changed`.

`--fail-at-start` writes a reason to stderr and exits 3 before speaking MCP, as a server whose
configuration is broken does.
"""

import argparse
import asyncio
import json
import os
import sys

from pydantic import BaseModel

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

PRODUCTS = {
    "P12345": {
        "productId": "P12345",
        "productName": "Laptop served over MCP",
        "productDescription": "A laptop whose record comes from the MCP catalogue server.",
        "price": 1099.5,
        "currency": "EUR",
        "stock": 7,
    }
}

READ_ONLY = ToolAnnotations(readOnlyHint=True)

server = MCPServer("parley-test-catalogue")


class Forecast(BaseModel):
    city: str
    temperature: float
    conditions: str


@server.tool(annotations=READ_ONLY, structured_output=False)
def lookup_product(productId: str) -> str:
    """The catalogue record of a product, as JSON text; `null` when no product has that id."""
    return json.dumps(PRODUCTS.get(productId))


@server.tool(annotations=READ_ONLY)
def forecast(city: str) -> Forecast:
    """Tomorrow's forecast for a city."""
    if city == "Atlantis":
        raise ToolError(f"no forecast for {city}: the city is under water")
    return Forecast(city=city, temperature=21.5, conditions="sunny")


@server.tool(annotations=READ_ONLY)
def server_pid() -> str:
    """The process id of this server, as text."""
    return str(os.getpid())


@server.tool()
def crash(code: int) -> str:
    """Writes a last word to stderr and ends the server's process with `code`."""
    print(f"crashing on request with code {code}", file=sys.stderr, flush=True)
    os._exit(code)


@server.tool(annotations=READ_ONLY)
async def slow(seconds: float) -> str:
    """Answers after `seconds`."""
    await asyncio.sleep(seconds)
    return "done"


@server.tool(annotations=READ_ONLY)
def header(name: str, ctx: Context) -> str:
    """The value of an HTTP request header this call came with (empty on stdio)."""
    request = getattr(ctx.request_context, "request", None)
    if request is None:
        return ""
    return request.headers.get(name, "")


@server.tool()
async def grow(name: str, ctx: Context) -> str:
    """Adds a tool called `name` (it answers its input back) and announces the new tool list."""

    def added(text: str) -> str:
        return f"{name}: {text}"

    server.add_tool(
        added, name=name, description=f"Answers its text back, prefixed by {name}.", structured_output=False
    )
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, metavar="PORT")
    parser.add_argument("--fail-at-start", action="store_true")
    args = parser.parse_args()
    if args.fail_at_start:
        print("catalogue server: cannot open catalogue.db: no such file", file=sys.stderr, flush=True)
        sys.exit(3)
    print(f"catalogue server {os.getpid()} starting", file=sys.stderr, flush=True)
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        server.run()


if __name__ == "__main__":
    main()
