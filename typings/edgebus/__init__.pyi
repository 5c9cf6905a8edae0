# Type stubs of the core's public API, for mypy over the host packages (docs/api.md,
# "Types"). The core itself stays unannotated: MicroPython has no typing module.
# `python -m mypy.stubtest edgebus` checks these stubs against the code.
from .bus import Bus as Bus
from .compat import now as now
from .errors import BusError as BusError
from .errors import CallError as CallError
from .errors import Closed as Closed
from .errors import Denied as Denied
from .errors import Disconnected as Disconnected
from .errors import Failed as Failed
from .errors import Full as Full
from .errors import NoRoute as NoRoute
from .errors import Timeout as Timeout
from .request import Request as Request
from .topic import literal as literal
from .values import Message as Message
from .values import Origin as Origin
from .values import RetainedEvent as RetainedEvent

__version__: str
