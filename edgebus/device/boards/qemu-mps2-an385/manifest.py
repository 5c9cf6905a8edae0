# Freeze manifest of the board's own modules; edgebus firmware build includes
# it and adds edgebus and firmware (tools/boardkit/firmware.py).
# asyncio: the port builds without asyncio (MICROPY_PY_ASYNCIO=0); the board
# compiles the C _asyncio itself (asyncio_c.c) and the pure-Python package is
# frozen without its task.py, which only stands in for _asyncio.
package(
    "asyncio",
    ("__init__.py", "core.py", "event.py", "funcs.py", "lock.py", "stream.py"),
    base_path="$(MPY_DIR)/extmod",
    opt=3,
)
module("_boot.py", base_path="$(BOARD_DIR)/modules")
module("mps2uart.py", base_path="$(BOARD_DIR)/modules")
