# Freeze manifest of the board's own modules; edgebus firmware build includes
# it and adds edgebus and firmware (tools/firmware.py).
# asyncio: the port builds without the C _asyncio (MICROPY_PY_ASYNCIO=0), so
# the pure-Python package is frozen with its task.py.
package("asyncio", ("__init__.py", "core.py", "event.py", "funcs.py", "lock.py", "stream.py",
                    "task.py"), base_path="$(MPY_DIR)/extmod", opt=3)
module("_boot.py", base_path="$(BOARD_DIR)/modules")
module("mps2uart.py", base_path="$(BOARD_DIR)/modules")
