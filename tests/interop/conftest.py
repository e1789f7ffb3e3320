"""Fixtures for the interoperability suite: a client built the way the Python reference
SDK's users build one (nlip_sdk messages, serialized with the SDK's own ``to_dict`` and
parsed back with ``NLIP_Message``), pointed at the Parley server named by ``PARLEY_URL``.

The SDK on PyPI (nlip-sdk) has no HTTP client of its own, so the transport is httpx,
posting ``msg.to_dict()`` as JSON and following redirects, as the reference client does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from nlip_sdk.nlip import NLIP_Message


def _base_url() -> str:
    url = os.environ.get("PARLEY_URL")
    if not url:
        pytest.exit(
            "PARLEY_URL is not set: point it at a running Parley, e.g. "
            "PARLEY_URL=http://127.0.0.1:8080/nlip",
            returncode=2,
        )
    url = url.rstrip("/")
    if url.endswith("/nlip"):
        url = url[: -len("/nlip")]
    return url


@dataclass
class Exchange:
    """One request/response pair: the HTTP response, its raw JSON, and the SDK's parse."""

    response: httpx.Response
    raw: Any
    message: NLIP_Message


class SdkClient:
    """Sends SDK messages to Parley and parses the replies with the SDK."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.http = httpx.Client(timeout=30.0, follow_redirects=True)

    def url(self, path: str = "/nlip") -> str:
        return self.base_url + path

    def send(self, msg: NLIP_Message, path: str = "/nlip") -> Exchange:
        return self.post_json(msg.to_dict(), path)

    def post_json(self, body: Any, path: str = "/nlip") -> Exchange:
        return self._parse(self.http.post(self.url(path), json=body))

    def post_bytes(self, body: bytes, content_type: str = "application/json",
                   path: str = "/nlip") -> Exchange:
        return self._parse(self.http.post(self.url(path), content=body,
                                          headers={"content-type": content_type}))

    @staticmethod
    def _parse(response: httpx.Response) -> Exchange:
        ctype = response.headers.get("content-type", "")
        assert ctype.startswith("application/json"), (
            f"reply content type {ctype!r}, status {response.status_code}: {response.text[:500]}")
        raw = response.json()
        # The SDK's own parse, as its clients do: NLIP_Message(**data).
        message = NLIP_Message(**raw)
        return Exchange(response=response, raw=raw, message=message)

    def close(self) -> None:
        self.http.close()


@pytest.fixture(scope="session")
def base_url() -> str:
    return _base_url()


@pytest.fixture(scope="session")
def client(base_url: str):
    c = SdkClient(base_url)
    try:
        yield c
    finally:
        c.close()
