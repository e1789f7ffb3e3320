"""AgentConnect as provider for a Parley requester speaking seed 002's framing.

Serves one WebSocket connection on 127.0.0.1 (an OS-chosen port, printed first as
{"listening": PORT}) with AgentConnect's own `MetaProtocol` (agent-connect 0.3.7) in the
provider's role, its model calls going to the OpenAI-compatible server at MODEL_BASE_URL (a
scripted server in the tests): it waits for the requester's proposal, evaluates it (asking its
capability callback when the model calls that tool), generates its code, swaps `codeGeneration`,
then answers application messages through the provider class it generated, backed by a small
product table. When the requester closes the connection it prints one JSON line: what happened
and every frame both ways.
"""

import asyncio
import importlib.util
import json
import os

import websockets
from openai import AsyncOpenAI

from agent_connect.meta_protocol import MetaProtocol
from agent_connect.utils.llm.base_llm import AzureLLM

PRODUCTS = {
    "P12345": {
        "productId": "P12345",
        "productName": "High-performance Laptop",
        "productDescription": "High-performance laptop with the latest processor and large memory capacity.",
        "price": 1299.99,
        "currency": "USD",
    }
}


def describe(data):
    """A frame as the report shows it: its protocol type and its JSON (or text)."""
    kind = "bare" if data[:1] == b"{" else data[0] >> 6
    body = data if kind == "bare" else data[1:]
    try:
        return {"type": kind, "json": json.loads(body)}
    except ValueError:
        return {"type": kind, "text": body.decode("utf-8", "replace")}


def load_provider(module_path):
    """The generated provider class: the one class in provider.py with handle_message."""
    spec = importlib.util.spec_from_file_location(
        "generated_provider", os.path.join(module_path, "provider.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for value in vars(module).values():
        if isinstance(value, type) and hasattr(value, "handle_message"):
            return value
    raise RuntimeError("no provider class in the generated code")


async def capability_info(requirement, input_description, output_description):
    return (
        "This provider looks products up by productId and returns productName, "
        "productDescription, price and currency, or status 404 when the id is unknown."
    )


async def lookup(arguments):
    product = PRODUCTS.get(arguments.get("productId"))
    if product is None:
        return {"status": {"code": 404, "message": "Product not found"}, "productInfo": None}
    return {"status": {"code": 200, "message": "Success"}, "productInfo": product}


async def main():
    llm = AzureLLM(AsyncOpenAI(base_url=os.environ["MODEL_BASE_URL"], api_key="scripted"), "scripted-model")
    report = {"sent": [], "received": []}
    finished = asyncio.Event()

    async def session(ws):
        async def send(data):
            report["sent"].append(describe(data))
            await ws.send(data)

        meta = MetaProtocol(
            send_callback=send,
            get_capability_info_callback=capability_info,
            llm=llm,
            protocol_code_path=os.environ["AC_CODE_DIR"],
        )
        # Its waits (60 s each) stretched: a loaded test machine may take longer to answer.
        meta.negotiation_timeout_seconds = meta.code_generation_timeout_seconds = 300
        provider = None
        pending = []

        async def receive():
            async for data in ws:
                data = data if isinstance(data, bytes) else data.encode()
                report["received"].append(describe(data))
                if data[:1] == b"{" or data[0] >> 6 == 1:
                    if provider is None:
                        pending.append(data)
                    else:
                        await provider.handle_message(data)
                elif data[0] >> 6 == 0:
                    meta.handle_meta_data(data)

        receiving = asyncio.create_task(receive())
        negotiated, module_path = await meta.wait_remote_negotiation()
        report["negotiated"] = negotiated
        if negotiated:
            await meta.notify_code_generation()
            report["peer_generated"] = await meta.wait_for_code_generation()
            provider = load_provider(module_path)()
            provider.set_send_callback(send)
            provider.set_protocol_callback(lookup)
            for data in pending:
                await provider.handle_message(data)
        try:
            await receiving
        except websockets.ConnectionClosed:
            pass
        finished.set()

    async with websockets.serve(session, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        print(json.dumps({"listening": port}), flush=True)
        await asyncio.wait_for(finished.wait(), 600)
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
