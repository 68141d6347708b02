"""mwnotebook/engine/workers/wire.py: messages parsed as the Jupyter protocol says, forged ones refused."""

from __future__ import annotations

import pytest
from jupyter_client.session import Session

from mwnotebook.engine.workers.wire import parse


def _frames(session: Session, content: dict) -> list[bytes]:
    msg = session.msg("execute_reply", content, parent={"msg_id": "req-1"})
    frames = session.serialize(msg)
    _identities, frames = session.feed_identities(frames)
    return frames


def test_a_signed_message_is_parsed_with_its_dates_left_as_text():
    session = Session(key=b"secret")
    msg = parse(Session(key=b"secret"), _frames(session, {"status": "ok"}))
    assert msg["msg_type"] == "execute_reply" and msg["content"] == {"status": "ok"}
    assert msg["parent_header"] == {"msg_id": "req-1"}
    assert isinstance(msg["header"]["date"], str)


def test_a_forged_or_replayed_message_is_refused():
    frames = _frames(Session(key=b"secret"), {"status": "ok"})
    with pytest.raises(ValueError, match="invalid signature"):
        parse(Session(key=b"other"), frames)
    reader = Session(key=b"secret")
    parse(reader, frames)
    with pytest.raises(ValueError, match="replayed"):
        parse(reader, frames)
    with pytest.raises(ValueError, match="unsigned"):
        parse(Session(key=b"secret"), [b"", *frames[1:]])


def test_worker_clients_share_one_zmq_context_that_stopping_one_leaves_open():
    from mwnotebook.engine.workers.wire import WorkerClient

    first, second = WorkerClient(), WorkerClient()
    assert first.context is second.context
    first.stop_channels()
    assert not second.context.closed
