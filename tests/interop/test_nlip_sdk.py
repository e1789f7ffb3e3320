"""Interoperability of Parley with the Python reference SDK (nlip-sdk).

Every request is built with the SDK's classes (NLIP_Factory, NLIP_Message, NLIP_SubMessage
and their add_* helpers) and serialized with the SDK's ``to_dict``; every reply must parse
with the SDK's ``NLIP_Message`` and carry the values the SDK's users read from it.
Run against a live server: ``PARLEY_URL=http://127.0.0.1:8080/nlip .venv/bin/python -m pytest tests/interop -q``.
"""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit

import pytest
from nlip_sdk.nlip import (
    AllowedFormats,
    NLIP_Factory,
    NLIP_Message,
    NLIP_SubMessage,
    ReservedTokens,
)

PARLEY_CONVERSATION = "conversation_parley"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def submessages(msg: NLIP_Message) -> list[NLIP_SubMessage]:
    return list(msg.submessages or [])


def tokens_with_subformat(msg: NLIP_Message, subformat: str) -> list[NLIP_SubMessage]:
    return [s for s in submessages(msg)
            if s.format == AllowedFormats.token and s.subformat.lower() == subformat.lower()]


def assert_lowercase_keys_and_no_nulls(raw) -> None:
    """The SDK parses lowercase keys only and has no use for nulls."""
    if isinstance(raw, dict):
        for key, value in raw.items():
            assert key == key.lower(), f"key {key!r} is not lowercase"
            assert value is not None, f"key {key!r} is null"
        for key in ("submessages",):
            for sub in raw.get(key, []) or []:
                assert_lowercase_keys_and_no_nulls(sub)


def assert_ok_data_reply(ex) -> NLIP_Message:
    assert ex.response.status_code == 200, ex.raw
    assert not ex.response.history, "answered through a redirect"
    assert_lowercase_keys_and_no_nulls(ex.raw)
    reply = ex.message
    assert not reply.is_control_msg()
    assert (reply.messagetype or "").lower() != "error", ex.raw
    return reply


def assert_error_reply(ex, status: int, code: str) -> NLIP_Message:
    assert ex.response.status_code == status, ex.raw
    assert_lowercase_keys_and_no_nulls(ex.raw)
    reply = ex.message
    assert reply.messagetype is not None and reply.messagetype.lower() == "error", ex.raw
    # A text part any SDK client can show ...
    assert reply.format == AllowedFormats.text
    assert reply.subformat == "english"
    assert isinstance(reply.content, str) and reply.content.strip()
    # ... and the machine-readable fields in a structured part labelled "error".
    details = reply.find_labeled_submessage("error")
    assert details is not None, ex.raw
    assert details.format == AllowedFormats.structured
    assert isinstance(details.content, dict)
    assert details.content["code"] == code, details.content
    assert details.content["message"], details.content
    return reply


# (a) plain text ------------------------------------------------------------------------

def test_plain_text_reply_parses_as_english_text(client):
    msg = NLIP_Factory.create_text("Hello! What can you do for me?")
    assert msg.to_dict() == {
        "format": "text", "subformat": "english", "content": "Hello! What can you do for me?"}

    ex = client.send(msg)
    reply = assert_ok_data_reply(ex)
    assert ex.response.headers["content-type"].startswith("application/json")
    assert reply.format == "text"
    assert reply.subformat == "english"
    assert isinstance(reply.content, str) and reply.content.strip()
    # What an SDK client reads: the English text of the reply.
    text = reply.extract_text("english")
    assert text is not None and reply.content in text
    # A stateless exchange carries no tokens the client did not send.
    assert reply.extract_conversation_token() is None
    assert reply.extract_authentication_token() is None


def test_text_in_another_language_is_answered_in_that_subformat(client):
    msg = NLIP_Factory.create_text("Bonjour, que savez-vous faire ?", language="french")
    reply = assert_ok_data_reply(client.send(msg))
    assert reply.format == "text"
    assert reply.subformat == "french"
    assert reply.extract_text("french")


# (b) conversation token and JSON submessage --------------------------------------------

def test_conversation_token_is_echoed_and_parley_adds_its_own(client):
    conv = unique("sdk-conversation")
    msg = NLIP_Factory.create_text("I would like to see your product catalogue.")
    msg.add_conversation_token(conv)
    msg.add_json({"order": {"sku": "A-100", "quantity": 2}, "urgent": False}, label="order")
    sent = msg.to_dict()
    assert sent["submessages"][0] == {
        "format": "token", "subformat": "conversation", "content": conv}
    assert sent["submessages"][1]["subformat"] == "JSON"

    ex = client.send(msg)
    reply = assert_ok_data_reply(ex)
    assert reply.format == "text" and reply.subformat == "english"

    # The SDK finds the peer's own conversation token, unchanged.
    assert reply.extract_conversation_token() == conv
    echoed = tokens_with_subformat(reply, "conversation")
    assert len(echoed) == 1, ex.raw
    assert echoed[0].subformat == "conversation"  # exact spelling, not normalised
    assert echoed[0].content == conv
    raw_echo = [s for s in ex.raw["submessages"] if s.get("subformat") == "conversation"]
    assert raw_echo == [{"format": "token", "subformat": "conversation", "content": conv}]

    # Parley's own conversation token (ECMA-430 §6.2: creator identity after '_').
    own = tokens_with_subformat(reply, PARLEY_CONVERSATION)
    assert len(own) == 1, ex.raw
    parley_id = own[0].content
    assert isinstance(parley_id, str) and parley_id
    assert ReservedTokens.is_conv(own[0].subformat)

    # The same peer token again lands in the same Parley conversation.
    again = NLIP_Factory.create_text("And what about delivery times?")
    again.add_conversation_token(conv)
    reply2 = assert_ok_data_reply(client.send(again))
    assert reply2.extract_conversation_token() == conv
    assert [t.content for t in tokens_with_subformat(reply2, PARLEY_CONVERSATION)] == [parley_id]

    # Continuing with Parley's own token: Parley re-issues it once, with the same id
    # (it is not echoed a second time as if it were a foreign token).
    cont = NLIP_Factory.create_text("Thanks.")
    cont.add_submessage(NLIP_SubMessage(format=AllowedFormats.token,
                                        subformat=PARLEY_CONVERSATION, content=parley_id))
    reply3 = assert_ok_data_reply(client.send(cont))
    assert [t.content for t in tokens_with_subformat(reply3, PARLEY_CONVERSATION)] == [parley_id]


def test_unknown_parley_conversation_is_an_nlip_error(client):
    msg = NLIP_Factory.create_text("Resume, please.")
    msg.add_submessage(NLIP_SubMessage(format=AllowedFormats.token,
                                       subformat=PARLEY_CONVERSATION,
                                       content=unique("no-such-conversation")))
    assert_error_reply(client.send(msg), 422, "unknown_conversation")


# (c) control ---------------------------------------------------------------------------

def test_control_message_gets_a_control_reply(client):
    msg = NLIP_Factory.create_control("Describe this end-point.")
    assert msg.is_control_msg()
    assert msg.to_dict()["messagetype"] == "control"

    ex = client.send(msg)
    assert ex.response.status_code == 200, ex.raw
    assert_lowercase_keys_and_no_nulls(ex.raw)
    reply = ex.message
    assert reply.is_control_msg(), ex.raw
    assert reply.messagetype == "control"
    assert reply.format == "text" and reply.subformat == "english"
    assert isinstance(reply.content, str) and reply.content.strip()


def test_control_upload_request_announces_an_upload_uri_on_another_port(client, base_url):
    msg = NLIP_Factory.create_control("Please give me an upload end-point for a large file.")
    ex = client.send(msg)
    assert ex.response.status_code == 200, ex.raw
    reply = ex.message
    assert reply.is_control_msg(), ex.raw
    uris = reply.extract_field_list(AllowedFormats.structured, "uri")
    assert len(uris) == 1, ex.raw
    upload = urlsplit(uris[0])
    assert upload.scheme in ("http", "https")
    assert upload.port is not None and upload.port != urlsplit(base_url).port  # ECMA-431


# (d) authentication token as the SDK spells it -----------------------------------------

def test_authorization_token_is_echoed_exactly(client):
    secret = unique("Bearer sdk-secret")
    msg = NLIP_Factory.create_text("Who am I talking to?")
    msg.add_authentication_token(secret)
    assert msg.to_dict()["submessages"] == [
        {"format": "token", "subformat": "authorization", "content": secret}]

    ex = client.send(msg)
    reply = assert_ok_data_reply(ex)
    assert reply.extract_authentication_token() == secret
    echoed = tokens_with_subformat(reply, "authorization")
    assert [(t.subformat, t.content) for t in echoed] == [("authorization", secret)]
    # Stateless: no conversation token appears from nowhere.
    assert tokens_with_subformat(reply, PARLEY_CONVERSATION) == []


def test_every_token_is_echoed_on_one_message(client):
    conv, auth, custom = unique("c"), unique("a"), unique("g")
    msg = NLIP_Factory.create_text("Hello with several tokens.")
    msg.add_conversation_token(conv, label="mine")
    msg.add_authentication_token(auth)
    msg.add_submessage(NLIP_SubMessage(format=AllowedFormats.token,
                                       subformat="group_7", content=custom))
    ex = client.send(msg)
    assert_ok_data_reply(ex)
    def canon(subs):
        return sorted(tuple(sorted(s.items())) for s in subs)

    sent_tokens = msg.to_dict()["submessages"]
    got = [s for s in ex.raw["submessages"] if s["format"] == "token"
           and s["subformat"] != PARLEY_CONVERSATION]
    # Same format, subformat and content (§6.2); the label travels along.
    assert canon(got) == canon(sent_tokens), ex.raw


def test_tokens_are_echoed_on_control_replies(client):
    secret = unique("ctl-secret")
    msg = NLIP_Factory.create_control("Describe this end-point.")
    msg.add_authentication_token(secret)
    reply = client.send(msg).message
    assert reply.is_control_msg()
    assert reply.extract_authentication_token() == secret


# (e) trailing slash --------------------------------------------------------------------

def test_trailing_slash_end_point_answers_directly(client):
    msg = NLIP_Factory.create_text("Hello through /nlip/")
    msg.add_authentication_token("slash-token")
    ex = client.send(msg, path="/nlip/")
    reply = assert_ok_data_reply(ex)  # 200 with no redirect on the way
    assert str(ex.response.url).endswith("/nlip/")
    assert reply.format == "text" and reply.subformat == "english"
    assert reply.extract_authentication_token() == "slash-token"


def test_trailing_slash_control(client):
    reply = client.send(NLIP_Factory.create_control("Describe this end-point."),
                        path="/nlip/").message
    assert reply.is_control_msg()


# (f) invalid messages ------------------------------------------------------------------

def test_unknown_format_built_with_the_sdk_gets_an_nlip_error(client):
    # The SDK types the top-level format as a plain string, so it lets this through.
    msg = NLIP_Message(format="telepathy", subformat="english", content="Hi")
    assert_error_reply(client.send(msg), 422, "invalid_message")


def test_missing_content_gets_an_nlip_error(client):
    ex = client.post_json({"format": "text", "subformat": "english"})
    assert_error_reply(ex, 422, "invalid_message")


def test_malformed_json_gets_an_nlip_error(client):
    ex = client.post_bytes(b'{"format": "text", "subformat": "english", "content": ')
    assert_error_reply(ex, 400, "malformed_json")


def test_invalid_message_on_trailing_slash_gets_an_nlip_error(client):
    ex = client.post_json({"format": "text", "subformat": "", "content": "x"}, path="/nlip/")
    reply = assert_error_reply(ex, 422, "invalid_message")
    assert reply.find_labeled_submessage("error").content.get("field") == "subformat"


@pytest.mark.parametrize("path", ["/health"])
def test_health(client, path):
    r = client.http.get(client.url(path))
    assert r.status_code == 200
