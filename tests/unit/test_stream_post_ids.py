"""The stream learns the post id a posts-topic record announces without validating the whole
event (services/stream/feed.py): a post event gives its id; anything else, malformed or not a
post, gives None and never an exception (the projector dead-letters what it cannot use)."""

from __future__ import annotations

import pytest

from tests.support.events import encode_v2, post_ev
from tickerwire.schemas.models import encode_event
from tickerwire.services.stream.feed import announced_post_id


def test_a_post_event_gives_its_id():
    assert announced_post_id(encode_event(post_ev(4711))) == 4711
    assert announced_post_id(b'{"type":"post","version":1,"data":{"id":9007199254740992}}') == 2**53


def test_either_version_and_a_schema_registry_frame_give_the_id():
    assert announced_post_id(encode_v2(post_ev(4712))) == 4712
    assert announced_post_id(b"\x00\x00\x00\x00\x07" + encode_v2(post_ev(4713))) == 4713
    assert announced_post_id(b"\x00\x00\x00\x00\x07" + encode_event(post_ev(4714))) == 4714


@pytest.mark.parametrize(
    "value",
    [
        None,
        b"",
        b"{",
        b"\xff\xfe",
        b"[]",
        b"7",
        b'{"type":"post"}',
        b'{"type":"post","data":null}',
        b'{"type":"post","data":[]}',
        b'{"type":"post","data":{}}',
        b'{"type":"post","data":{"id":"7"}}',
        b'{"type":"post","data":{"id":7.0}}',
        b'{"type":"post","data":{"id":true}}',
        b'{"type":"post","data":{"id":0}}',
        b'{"type":"post","data":{"id":9007199254740993}}',
        b'{"type":"heartbeat","data":{"id":7}}',
        b'{"data":{"id":7}}',
        b'{"type":7,"data":{"id":7}}',
    ],
)
def test_anything_else_gives_none(value):
    assert announced_post_id(value) is None
