// edgebus board MPS2-AN385: settings on top of ports/qemu/mpconfigport.h
// (force-included by mpconfigboard.mk, so only what that file leaves unset).

// os.urandom: board.c seeds it per boot (the port's generator has a fixed seed).
#define MICROPY_PY_OS_URANDOM (1)
#define MICROPY_PY_RANDOM_SEED_INIT_FUNC (board_random_seed())

// Sleep until the next interrupt (SysTick every ms, the link UART) instead of
// spinning: an idle board then costs the host almost no CPU.
#define MICROPY_INTERNAL_WFE(TIMEOUT_MS) __asm volatile ("wfi")
// The REPL UART is read only by the REPL: while a program runs, this hook
// looks for Ctrl-C there so that the runtime can be interrupted (mpremote).
#define MICROPY_INTERNAL_EVENT_HOOK board_event_hook()

#ifndef __ASSEMBLER__
#include <stdint.h>
void board_event_hook(void);
uint32_t board_random_seed(void);
#endif

// time.time()/time_ns(): the host's clock through semihosting (board.c), Unix
// epoch, so the link stamps readings with wall time (ts_device) as on boards
// with an RTC set by NTP. No calendar functions (gmtime): they are not needed.
#define MICROPY_EPOCH_IS_1970 (1)
#define MICROPY_PY_TIME_TIME_TIME_NS (1)
#define MICROPY_PY_TIME_INCLUDEFILE "board_time.h"
