"""A minimal client of Foxglove's WebSocket protocol (the published spec: JSON control messages, binary message
data ``0x01 | u32 subscription id | u64 log time | payload``), written for the tests: it offers both
subprotocols (``foxglove.sdk.v1`` of foxglove-sdk >= 0.30, ``foxglove.websocket.v1`` of older servers),
subscribes to topics and decodes protobuf payloads with the FileDescriptorSet the server advertises, JSON ones
with ``json``.
"""

from __future__ import annotations

import base64
import json
import struct
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

SUBPROTOCOLS = ("foxglove.sdk.v1", "foxglove.websocket.v1")
MESSAGE_DATA = 0x01


@dataclass
class Received:
    """One decoded message."""

    topic: str
    log_time_ns: int
    schema_name: str
    message: Any  # a protobuf message or a JSON value


class FoxgloveClient:
    """Connects, reads the advertised channels, subscribes, decodes (a background thread collects)."""

    def __init__(self, url: str) -> None:
        from websockets.sync.client import connect

        self.ws = connect(url, subprotocols=list(SUBPROTOCOLS), max_size=None, open_timeout=30).__enter__()
        self.subprotocol = self.ws.subprotocol
        self.server_info: dict[str, Any] = {}
        self.channels: dict[int, dict[str, Any]] = {}
        self._decoders: dict[int, Any] = {}
        self._subscriptions: dict[int, int] = {}  # subscription id -> channel id
        self.received: list[Received] = []
        self.lock = threading.RLock()  # predicates of wait_for read messages under it
        self.changed = threading.Condition(self.lock)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def wait_for_channels(self, topics: Iterable[str], timeout_s: float = 30.0) -> dict[str, int]:
        """Channel ids of ``topics`` once all are advertised."""
        wanted = set(topics)
        with self.changed:
            self.changed.wait_for(lambda: wanted <= {c["topic"] for c in self.channels.values()}, timeout_s)
            found = {c["topic"]: cid for cid, c in self.channels.items() if c["topic"] in wanted}
        missing = wanted - set(found)
        assert not missing, f"not advertised: {sorted(missing)}; got {[c['topic'] for c in self.channels.values()]}"
        return found

    def subscribe(self, topics: Iterable[str]) -> None:
        """Subscribe to ``topics`` (advertised ones)."""
        ids = self.wait_for_channels(topics)
        subscriptions = []
        with self.lock:
            for channel_id in ids.values():
                sub_id = len(self._subscriptions) + 1
                self._subscriptions[sub_id] = channel_id
                subscriptions.append({"id": sub_id, "channelId": channel_id})
        self.ws.send(json.dumps({"op": "subscribe", "subscriptions": subscriptions}))

    def messages(self, topic: str) -> list[Received]:
        """What arrived on ``topic`` so far."""
        with self.lock:
            return [r for r in self.received if r.topic == topic]

    def wait_for(self, predicate: Any, timeout_s: float = 60.0) -> bool:
        """Wait until ``predicate(client)`` holds (re-checked on every message)."""
        with self.changed:
            return self.changed.wait_for(lambda: predicate(self), timeout_s)

    def close(self) -> None:
        self.ws.close()
        self._thread.join(10)

    # ---- reading

    def _read(self) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            for frame in self.ws:
                if isinstance(frame, str):
                    self._control(json.loads(frame))
                else:
                    self._data(frame)
        except ConnectionClosed:
            pass
        finally:
            with self.changed:
                self.changed.notify_all()

    def _control(self, message: dict[str, Any]) -> None:
        with self.changed:
            if message.get("op") == "serverInfo":
                self.server_info = message
            elif message.get("op") == "advertise":
                for channel in message["channels"]:
                    self.channels[channel["id"]] = channel
                    self._decoders[channel["id"]] = _decoder(channel)
            self.changed.notify_all()

    def _data(self, frame: bytes) -> None:
        if frame[0] != MESSAGE_DATA:
            return
        sub_id, log_time = struct.unpack_from("<IQ", frame, 1)
        payload = frame[13:]
        with self.changed:
            channel_id = self._subscriptions[sub_id]
            channel = self.channels[channel_id]
            message = self._decoders[channel_id](payload)
            self.received.append(Received(channel["topic"], log_time, channel.get("schemaName", ""), message))
            self.changed.notify_all()


def _decoder(channel: dict[str, Any]) -> Any:
    """payload bytes → message, per the channel's encoding."""
    encoding = channel["encoding"]
    if encoding == "json":
        return lambda payload: json.loads(bytes(payload).decode("utf-8"))
    if encoding != "protobuf":
        raise AssertionError(f"unexpected encoding {encoding!r} on {channel['topic']}")
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    files = descriptor_pb2.FileDescriptorSet.FromString(base64.b64decode(channel["schema"]))
    pool = descriptor_pool.DescriptorPool()
    pending = list(files.file)
    while pending:  # dependencies first
        added = [f for f in pending if all(_has_file(pool, d) for d in f.dependency)]
        assert added, f"unresolvable schema dependencies in {channel['schemaName']}"
        for f in added:
            pool.Add(f)
            pending.remove(f)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(channel["schemaName"]))
    return cls.FromString


def _has_file(pool: Any, name: str) -> bool:
    try:
        pool.FindFileByName(name)
    except KeyError:
        return False
    return True
