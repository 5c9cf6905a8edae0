# Type stubs of the core's public API, for mypy over the host packages (docs/api.md,
# "Types"). The core itself stays unannotated: MicroPython has no typing module.
# `python -m mypy.stubtest edgebus` checks these stubs against the code.
from .bus import Bus as Bus
from .compat import now as now
from .errors import (BusError as BusError, CallError as CallError, Closed as Closed,
                     Denied as Denied, Disconnected as Disconnected, Failed as Failed,
                     Full as Full, NoRoute as NoRoute, Timeout as Timeout)
from .request import Request as Request
from .topic import literal as literal
from .values import Message as Message, Origin as Origin, RetainedEvent as RetainedEvent

__version__: str
