// The C _asyncio module (TaskQueue, Task) for this board. The qemu port's
// mpconfigport.h fixes MICROPY_PY_ASYNCIO at 0 and the board header is
// included before it, so the module is compiled here with the option turned
// on, without touching the port's files. The frozen asyncio package takes
// TaskQueue and Task from _asyncio when it exists: the pure-Python task.py
// would put two classes and every Task's instance dictionary on the GC heap
// (measured on this board: about 1 KB at import, ~100 B per task), while the
// C versions live in flash and a Task is a fixed 44-byte struct.
#include "py/mpconfig.h"
#undef MICROPY_PY_ASYNCIO
#define MICROPY_PY_ASYNCIO (1)
#include "extmod/modasyncio.c"
