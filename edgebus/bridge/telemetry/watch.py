"""The operator's warning while the telemetry log is behind: it pushes back
on durable links or drops other traffic, said at most every WARN_EVERY s."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edgebus.bridge.telemetry.flow import Flow
    from edgebus.bridge.telemetry.intake import Intake

log = logging.getLogger("edgebus.bridge")

# The operator's warning while the log pushes back or drops: at most this often.
WARN_EVERY = 10.0


class LogWatch:
    """What was said last, and when other traffic was last dropped."""

    def __init__(self, intake: Intake, flow: Flow) -> None:
        self.intake = intake
        self.flow = flow
        self.drops = (0, float("-inf"))  # dropped(), and when it last grew
        self.warned = (float("-inf"), 0, 0)  # (when, held, dropped) at the last warning

    def check(self, now: float) -> None:
        """The warning, if due and anything was held or dropped since the last."""
        d = self.intake.dropped()
        if d != self.drops[0]:
            self.drops = (d, now)
        t, held0, dropped0 = self.warned
        if now - t < WARN_EVERY:
            return
        flow = self.flow
        held = flow.held()
        if held == held0 and d == dropped0:
            return
        log.warning(
            "telemetry: the log is behind (%d of %d queued, high water %d): %d data "
            "frame(s) of durable links held back (their devices keep them spooled and "
            "send them again) and %d message(s) of other traffic dropped since the "
            "last warning",
            self.intake.queued(),
            flow.queue_len,
            flow.high,
            held - held0,
            d - dropped0,
        )
        self.warned = (now, held, d)

    def said(self, now: float) -> None:
        """What is held and dropped now counts as said (a failure's holds)."""
        self.warned = (now, self.flow.held(), self.intake.dropped())

    def dropping(self, now: float) -> bool:
        """Whether other traffic was dropped in the last WARN_EVERY s."""
        return now - self.drops[1] < WARN_EVERY
