# edgebus board: MPS2-AN385 (Cortex-M3) in qemu-system-arm, built as a BOARD_DIR
# board of MicroPython's ports/qemu (boards/README.md). What the stock board
# lacks for a device runtime is added here, without touching the port's files.
QEMU_ARCH = arm
QEMU_MACHINE = mps2-an385

CFLAGS += -mthumb -mcpu=cortex-m3 -mfloat-abi=soft
CFLAGS += -DQEMU_SOC_MPS2
CFLAGS += -DMICROPY_HW_MCU_NAME='"Cortex-M3"'
# The port's mpconfigport.h does not include a board header: force ours in.
CFLAGS += -include $(BOARD_DIR)/mpconfigboard.h -I$(BOARD_DIR)

LDSCRIPT = mcu/arm/mps2.ld

SRC_BOARD_O = shared/runtime/gchelper_native.o shared/runtime/gchelper_thumb2.o
SRC_C += $(BOARD_DIR)/board.c $(BOARD_DIR)/asyncio_c.c

# The port's main.c runs no boot.py/main.py and machine.reset() exits QEMU,
# and its os.urandom draws from a fixed seed: board.c wraps these.
LDFLAGS += -Wl,--wrap=mp_init -Wl,--wrap=exit -Wl,--wrap=mp_hal_get_random

MPY_CROSS_FLAGS += -march=armv7m

# littlefs for /config.json, the boot counter and the flash spool.
MICROPY_VFS_LFS2 = 1
