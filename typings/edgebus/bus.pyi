from typing import Any

from .conn import Connection, _Factory

class Bus:
    s_wild: str
    m_wild: str
    full: Any
    link_routes: Any
    def __init__(
        self,
        q_length: int = 10,
        full: str = "drop_oldest",
        s_wild: str = "+",
        m_wild: str = "#",
        authoriser: Any = None,
    ) -> None: ...
    def connect(
        self,
        principal: Any = None,
        origin_factory: _Factory | None = None,
        origin_base: dict[str, Any] | None = None,
    ) -> Connection: ...
    def endpoints(self) -> list[Any]: ...
    def stats(self) -> dict[str, Any]: ...
