"""The socket's text mode (futebus's spirit): a person or a shell script
talks to the host bus in lines on the bridge's unix socket, e.g. with
``socat - UNIX-CONNECT:bridge.sock``, without our client. The same
credentials and ACL apply as to a link client. A link client's first byte
is a frame delimiter (0x00); anything else starts a text session.

Commands, one a line; VALUE is JSON if it parses, else the rest of the line:
  pub TOPIC VALUE | retain TOPIC VALUE | call TOPIC [VALUE] | whoami | quit
  sub PATTERN [FULL] | watch PATTERN [FULL]
Answers: ``ok``, ``reply JSON``, ``whoami JSON``, ``error CODE TEXT``; what
the feeds deliver, as it comes: ``msg TOPIC JSON``, ``ret TOPIC JSON``,
``unret TOPIC``, ``synced PATTERN`` (the end of a watch's retained state);
``bye bridge stopping`` before the bridge closes the session.
FULL says what happens when this client reads slower than the bus delivers:
drop_oldest (the default), reject_newest, or disconnect, which ends the
session with ``error overflow PATTERN``; drops are counted as on any feed."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any

import edgebus
from edgebus.feed import POLICIES
from edgebus.topic import render

if TYPE_CHECKING:
    from edgebus.bridge.context import BridgeView

log = logging.getLogger("edgebus.bridge")
QUEUE = 256  # items a feed holds while the client is not reading
CALL_TIMEOUT = 5.0
VERBS = "pub, retain, call, sub, watch, whoami, quit"


def dumps(v: Any) -> str:
    return json.dumps(v, default=lambda b: {"hex": bytes(b).hex()})


def value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def item_line(feed: Any, it: Any) -> str:
    if type(it) is edgebus.Message:
        return "msg %s %s" % (render(it.topic), dumps(it.payload))
    if it.op == "replay_done":
        return "synced " + render(feed.topic)
    if it.op == "unretain":
        return "unret " + render(it.topic)
    return "ret %s %s" % (render(it.topic), dumps(it.payload))


class TextSession:
    """One text client: its commands in, its answers and feeds out."""

    def __init__(
        self,
        bridge: BridgeView,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        principal: Any,
        link_id: str,
    ) -> None:
        self.conn = bridge.bus.connect(
            principal=principal, origin_factory={"kind": "socket", "link_id": link_id}
        )
        self.reader, self.writer, self.link_id = reader, writer, link_id
        self.feeds: list[Any] = []  # edgebus feeds
        self.wake = asyncio.Event()

    def say(self, *words: str) -> None:
        self.writer.write((" ".join(words) + "\n").encode())

    async def run(self, bridge: BridgeView, first: bytes) -> None:
        pump = asyncio.create_task(self.pump())
        stop = asyncio.create_task(self.bye(bridge))
        try:
            while True:
                try:
                    line = await self.reader.readline()
                except (ValueError, OSError):  # a line over 64 KiB, a reset
                    break
                if not line and not first:
                    break
                text, first = (first + line).decode("utf-8", "replace").strip(), b""
                if text == "quit":
                    break
                if text:
                    await self.command(text)
                    await self.writer.drain()
        except ConnectionError:
            pass
        finally:
            pump.cancel()
            stop.cancel()
            self.conn.disconnect()
            self.writer.close()

    async def bye(self, bridge: BridgeView) -> None:
        """Say goodbye when the bridge stops (its reader then sees the end)."""
        await bridge.sleep(1e9)
        self.say("bye bridge stopping")
        self.writer.close()

    async def command(self, line: str) -> None:
        verb, _, rest = line.partition(" ")
        args = rest.split(None, 1)
        try:
            if verb in ("pub", "retain") and len(args) == 2:
                getattr(self.conn, "publish" if verb == "pub" else "retain")(
                    args[0], value(args[1])
                )
                self.say("ok")
            elif verb in ("sub", "watch") and 1 <= len(rest.split()) <= 2:
                w = rest.split() + ["drop_oldest"]
                f = (
                    self.conn.subscribe(w[0], QUEUE, w[1])
                    if verb == "sub"
                    else self.conn.watch_retained(w[0], QUEUE, w[1], replay=True)
                )
                f.wake_on(self.wake)
                self.feeds.append(f)
                self.wake.set()
                self.say("ok")
            elif verb == "call" and args:
                r = await self.conn.call(
                    args[0], value(args[1]) if len(args) > 1 else None, timeout=CALL_TIMEOUT
                )
                self.say("reply", dumps(r))
            elif verb == "whoami" and not rest:
                self.say("whoami", dumps({"principal": self.conn.principal, "link": self.link_id}))
            else:
                self.say(
                    "error usage",
                    "%r: commands are %s; FULL is one of %s" % (line, VERBS, ", ".join(POLICIES)),
                )
        except edgebus.Denied as e:
            self.say("error denied", str(e))
        except edgebus.Failed as e:
            self.say("error failed", dumps(e.reason))
        except edgebus.CallError as e:
            self.say("error", str(e.reason), args[0])
        except (ValueError, TypeError) as e:  # a bad topic or FULL
            self.say("error usage", str(e))

    async def pump(self) -> None:
        """Write what the feeds hold; a feed that overflowed ends the session."""
        while True:
            await self.wake.wait()
            self.wake.clear()
            for f in self.feeds:
                while True:
                    it = f.recv_nowait()
                    if it is None:
                        break
                    self.say(item_line(f, it))
                if f.why() == "overflow":
                    log.warning(
                        "text client %s could not keep up with %s: disconnected",
                        self.link_id,
                        render(f.topic),
                    )
                    self.say("error overflow", render(f.topic))
                    self.writer.close()
                    return
            await self.writer.drain()


async def serve(
    bridge: BridgeView,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    first: bytes,
    principal: Any,
    link_id: str,
) -> None:
    log.info(
        "text client %s (uid %d pid %d) connected", link_id, principal["uid"], principal["pid"]
    )
    await TextSession(bridge, reader, writer, principal, link_id).run(bridge, first)
    log.info("text client %s gone", link_id)
