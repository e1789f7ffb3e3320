"""AgentConnect as requester against a Parley provider's seed-002 end-point.

Drives AgentConnect's own `MetaProtocol` (agent-connect 0.3.7) over a WebSocket to
PARLEY_ANP_URL, with its model calls going to the OpenAI-compatible server at MODEL_BASE_URL (a
scripted server in the tests): it proposes a protocol, negotiates it, generates its code, swaps
`codeGeneration` with the provider, then loads the requester class it generated and sends
AC_REQUEST through it. Prints one JSON line: what happened and every frame both ways.

The generated requester imports `RequesterBase` from `agent_connect.app_protocols`, a module
0.3.7 does not ship; a minimal base class with the interface AgentConnect's code-generation
prompt describes is installed under that name first.
"""

import asyncio
import importlib.util
import json
import os
import sys
import types
from abc import ABC, abstractmethod

import websockets
from openai import AsyncOpenAI

from agent_connect.meta_protocol import MetaProtocol
from agent_connect.utils.llm.base_llm import AzureLLM

REQUIREMENT = "Look up one product in the provider's catalogue by its product id."
INPUT = "A product id such as P12345."
OUTPUT = "The product's name, description, price and currency, or a 404 status."


class RequesterBase(ABC):
    """The base class AgentConnect's generated requesters extend: a send callback for bytes,
    and received messages handed over by the transport."""

    def __init__(self):
        self._send_callback = None
        self.received_messages = []
        self.messages_event = asyncio.Event()

    def set_send_callback(self, callback):
        self._send_callback = callback

    async def handle_message(self, message):
        self.received_messages.append(message)
        self.messages_event.set()

    @abstractmethod
    async def send_request(self, input):
        ...


def install_base():
    module = types.ModuleType("agent_connect.app_protocols")
    module.RequesterBase = RequesterBase
    sys.modules["agent_connect.app_protocols"] = module


def load_requester(module_path):
    """The generated requester class: the one class in requester.py deriving RequesterBase."""
    spec = importlib.util.spec_from_file_location(
        "generated_requester", os.path.join(module_path, "requester.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for value in vars(module).values():
        if isinstance(value, type) and issubclass(value, RequesterBase) and value is not RequesterBase:
            return value
    raise RuntimeError("no requester class in the generated code")


def describe(data):
    """A frame as the report shows it: its protocol type and its JSON (or text)."""
    kind = "bare" if data[:1] == b"{" else data[0] >> 6
    body = data if kind == "bare" else data[1:]
    try:
        return {"type": kind, "json": json.loads(body)}
    except ValueError:
        return {"type": kind, "text": body.decode("utf-8", "replace")}


async def main():
    install_base()
    llm = AzureLLM(AsyncOpenAI(base_url=os.environ["MODEL_BASE_URL"], api_key="scripted"), "scripted-model")
    request = json.loads(os.environ["AC_REQUEST"])
    report = {"sent": [], "received": []}
    async with websockets.connect(os.environ["PARLEY_ANP_URL"]) as ws:

        async def send(data):
            report["sent"].append(describe(data))
            await ws.send(data)

        meta = MetaProtocol(send_callback=send, llm=llm, protocol_code_path=os.environ["AC_CODE_DIR"])
        # Its waits (60 s each) stretched: a loaded test machine may take longer to answer.
        meta.negotiation_timeout_seconds = meta.code_generation_timeout_seconds = 300
        requester = None
        pending = []

        async def receive():
            async for data in ws:
                data = data if isinstance(data, bytes) else data.encode()
                report["received"].append(describe(data))
                if data[:1] == b"{" or data[0] >> 6 == 1:
                    if requester is None:
                        pending.append(data)
                    else:
                        await requester.handle_message(data)
                elif data[0] >> 6 == 0:
                    meta.handle_meta_data(data)

        receiving = asyncio.create_task(receive())
        negotiated, module_path = await meta.negotiate_protocol(REQUIREMENT, INPUT, OUTPUT)
        report["negotiated"] = negotiated
        if negotiated:
            await meta.notify_code_generation()
            report["peer_generated"] = await meta.wait_for_code_generation()
            requester = load_requester(module_path)()
            requester.set_send_callback(send)
            for data in pending:
                await requester.handle_message(data)
            report["result"] = await asyncio.wait_for(requester.send_request(request), 60)
        receiving.cancel()
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main())
