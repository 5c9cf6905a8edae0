from typing import Any, NamedTuple

# A topic as the bus delivers it: its tokens (str or int).
_Topic = tuple[str | int, ...]

class Origin(NamedTuple):
    kind: str | None
    conn_id: str | None
    principal: Any
    link_id: str | None
    peer_node: str | None
    peer_sid: str | None
    generation: int | None
    extra: dict[str, Any] | None  # a FrozenDict

class Message(NamedTuple):
    topic: _Topic
    payload: Any
    origin: Origin

class RetainedEvent(NamedTuple):
    op: str
    topic: _Topic | None
    payload: Any
    origin: Origin

TRUSTED: tuple[str, ...]

class FrozenDict(dict[str, Any]):
    def __hash__(self) -> int: ...  # type: ignore[override]  # raises TypeError
