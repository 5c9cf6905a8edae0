// The C _asyncio module (TaskQueue, Task) for this board. The qemu port's
// mpconfigport.h fixes MICROPY_PY_ASYNCIO at 0 and the board header is
// included before it, so the module is compiled here with the option turned
// on, without touching the port's files. The frozen asyncio package takes
// TaskQueue and Task from _asyncio when it exists: the pure-Python task.py
// puts two classes and every Task's instance dictionary on the GC heap, while
// the C types live in flash and a Task is a 32-byte struct. Measured on this
// board (dev.qemuheap, 64 KB heap): asyncio's import 2,688 -> 2,048 bytes,
// the runtime at READY 40,704 -> 39,616, with a session up 47,216 -> 45,280.
#include "py/mpconfig.h"
#undef MICROPY_PY_ASYNCIO
#define MICROPY_PY_ASYNCIO (1)
#include "extmod/modasyncio.c"
