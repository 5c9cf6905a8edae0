// edgebus board MPS2-AN385 in QEMU: what a device runtime needs that the qemu
// port's own files do not give, added by wrapping at link time (-Wl,--wrap in
// mpconfigboard.mk) so that MicroPython's files stay unchanged:
// - start-up: after mp_init, run the frozen _boot.py (mounts littlefs), then
//   boot.py and main.py from it, as real ports do at power-on and soft reset;
// - exit() (machine.reset(), a fatal error) resets the board instead of
//   ending QEMU, so the emulated UARTs (pty or TCP) stay where they are;
// - os.urandom/random seeded per boot (the port's generator has a fixed seed);
// - the link UART (UART1) driven by its RX interrupt into a ring buffer, and
//   the "flash": a host file reached through semihosting (module mps2).
#include <string.h>

#include "py/runtime.h"
#include "py/mphal.h"
#include "py/stream.h"
#include "shared/runtime/pyexec.h"
#include "shared/runtime/interrupt_char.h"

// -- semihosting (QEMU -semihosting): host time and host files

#define SYS_OPEN 0x01
#define SYS_WRITE 0x05
#define SYS_READ 0x06
#define SYS_SEEK 0x0a
#define SYS_FLEN 0x0c
#define SYS_CLOCK 0x10
#define SYS_TIME 0x11

static uint32_t semihost(uint32_t op, const void *arg) {
    register uint32_t r0 __asm__ ("r0") = op;
    register const void *r1 __asm__ ("r1") = arg;
    __asm__ __volatile__ ("bkpt 0xAB" : "+r" (r0) : "r" (r1) : "memory");
    return r0;
}

// -- CMSDK APB UART registers (MPS2 AN385: UART0 0x40004000 is the REPL)

typedef struct {
    volatile uint32_t DATA, STATE, CTRL, INTSTATUS, BAUDDIV;
} uart_t;

#define UART0 ((uart_t *)0x40004000)
#define UART1 ((uart_t *)0x40005000)
#define STATE_TXFULL (1 << 0)
#define STATE_RXFULL (1 << 1)
#define CTRL_TX_EN (1 << 0)
#define CTRL_RX_EN (1 << 1)
#define CTRL_RX_INTEN (1 << 3)
#define INT_RX (1 << 1)
#define UART1_RX_IRQ 2            // QEMU mps2.c: UART n's RX interrupt is 2n
#define SCB_VTOR (*(volatile uint32_t *)0xE000ED08)
#define SCB_AIRCR (*(volatile uint32_t *)0xE000ED0C)
#define NVIC_ISER0 (*(volatile uint32_t *)0xE000E100)

// Why a C driver with an interrupt rather than Python over machine.mem32: the
// CMSDK UART holds one received byte, and QEMU hands over the next only after
// that one is read. Polled from Python every few ms that is one byte per poll
// (~200 B/s); the RX interrupt empties it as fast as QEMU delivers into a ring
// the link then reads in chunks. When the ring is full the byte stays in the
// UART and QEMU holds the rest in the host tty: back-pressure, no loss.
#define RX_SIZE 1024
static uint8_t rx_buf[RX_SIZE];
static volatile uint32_t rx_head, rx_tail;   // head: the ISR's, tail: the reader's

static void rx_take(void) {
    while ((UART1->STATE & STATE_RXFULL) && rx_head - rx_tail < RX_SIZE) {
        rx_buf[rx_head % RX_SIZE] = UART1->DATA;
        rx_head++;
    }
}

static void uart1_rx_irq(void) {
    UART1->INTSTATUS = INT_RX;
    rx_take();
}

// The port's vector table (startup.c) stops at SysTick; a copy in RAM adds ours.
static uint32_t vectors[16 + 32] __attribute__((aligned(256)));

static void board_init(void) {
    memcpy(vectors, (const void *)SCB_VTOR, 16 * sizeof(uint32_t));
    vectors[16 + UART1_RX_IRQ] = (uint32_t)uart1_rx_irq;
    SCB_VTOR = (uint32_t)vectors;
    UART1->BAUDDIV = 16;
    UART1->CTRL = CTRL_TX_EN | CTRL_RX_EN | CTRL_RX_INTEN;
    NVIC_ISER0 = 1 << UART1_RX_IRQ;
}

// -- start-up

void __real_mp_init(void);
void __wrap_mp_init(void) {
    static bool inited;
    __real_mp_init();
    if (!inited) {
        inited = true;
        board_init();
    }
    pyexec_frozen_module("_boot.py", false);
    if (pyexec_mode_kind == PYEXEC_MODE_FRIENDLY_REPL) {
        // Raw REPL soft resets (mpremote) skip them, as on other ports.
        pyexec_file_if_exists("boot.py");
        pyexec_file_if_exists("main.py");
    }
}

// -- reset: exit() and machine.reset() reset the board (SYSRESETREQ)

void __wrap_exit(int status) {
    (void)status;
    SCB_AIRCR = 0x05FA0004;
    for (;;) {
    }
}

// -- entropy: the emulator has no RNG. The host clock (semihosting) and the
// SysTick phase at first use differ per boot; firmware/bootid.py adds the
// boot counter so that sids never repeat even if these did.

static uint32_t rng_state;

static uint32_t mix32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352d;
    x ^= x >> 15;
    x *= 0x846ca68b;
    x ^= x >> 16;
    return x;
}

uint32_t board_random_seed(void) {
    uint32_t s = mix32(semihost(SYS_TIME, NULL));
    s = mix32(s ^ semihost(SYS_CLOCK, NULL));
    s = mix32(s ^ mp_hal_ticks_us());
    s = mix32(s ^ *(volatile uint32_t *)0xE000E018);   // SysTick current value
    return s ? s : 1;
}

void __wrap_mp_hal_get_random(size_t n, uint8_t *buf) {
    if (!rng_state) {
        rng_state = board_random_seed();
    }
    for (size_t i = 0; i < n; ++i) {
        rng_state ^= rng_state << 13;    // xorshift32
        rng_state ^= rng_state >> 17;
        rng_state ^= rng_state << 5;
        buf[i] = mix32(rng_state) >> 24;
    }
}

uint64_t mp_hal_time_ns(void) {
    static uint32_t t0, ms0;
    if (!t0) {
        t0 = semihost(SYS_TIME, NULL);
        ms0 = mp_hal_ticks_ms();
    }
    return (uint64_t)t0 * 1000000000ull + (uint64_t)(mp_hal_ticks_ms() - ms0) * 1000000ull;
}

// -- Ctrl-C on the REPL UART while a program runs (MICROPY_INTERNAL_EVENT_HOOK)

void board_event_hook(void) {
    if ((UART0->STATE & STATE_RXFULL) && (int)UART0->DATA == mp_interrupt_char) {
        mp_sched_keyboard_interrupt();
    }
}

// -- module mps2: the link UART and the host-file flash

static mp_obj_t mps2_uart_any(void) {
    return MP_OBJ_NEW_SMALL_INT(rx_head - rx_tail);
}
static MP_DEFINE_CONST_FUN_OBJ_0(mps2_uart_any_obj, mps2_uart_any);

// uart_read(n): up to n received bytes, or None when there are none.
static mp_obj_t mps2_uart_read(mp_obj_t n_in) {
    mp_int_t n = mp_obj_get_int(n_in);
    uint32_t have = rx_head - rx_tail;
    if (have == 0 || n <= 0) {
        return mp_const_none;
    }
    if ((uint32_t)n > have) {
        n = have;
    }
    vstr_t v;
    vstr_init_len(&v, n);
    for (mp_int_t i = 0; i < n; ++i) {
        v.buf[i] = rx_buf[(rx_tail + i) % RX_SIZE];
    }
    rx_tail += n;
    // A byte left in the UART while the ring was full raises no new interrupt.
    __asm volatile ("cpsid i");
    rx_take();
    __asm volatile ("cpsie i");
    return mp_obj_new_bytes_from_vstr(&v);
}
static MP_DEFINE_CONST_FUN_OBJ_1(mps2_uart_read_obj, mps2_uart_read);

// uart_write(buf): the number of bytes the UART took (0 when the host side is
// not reading); never blocks.
static mp_obj_t mps2_uart_write(mp_obj_t buf_in) {
    mp_buffer_info_t b;
    mp_get_buffer_raise(buf_in, &b, MP_BUFFER_READ);
    size_t i = 0;
    for (int spin = 0; i < b.len && spin < 1000; ++spin) {
        if (!(UART1->STATE & STATE_TXFULL)) {
            UART1->DATA = ((uint8_t *)b.buf)[i++];
            spin = 0;
        }
    }
    return MP_OBJ_NEW_SMALL_INT(i);
}
static MP_DEFINE_CONST_FUN_OBJ_1(mps2_uart_write_obj, mps2_uart_write);

// flash_open(path, create): a host file descriptor, or -1.
static mp_obj_t mps2_flash_open(mp_obj_t path_in, mp_obj_t create_in) {
    size_t len;
    const char *path = mp_obj_str_get_data(path_in, &len);
    uint32_t args[3] = {(uint32_t)path, mp_obj_is_true(create_in) ? 7 : 3, len};  // "w+b" : "r+b"
    return mp_obj_new_int((int32_t)semihost(SYS_OPEN, args));
}
static MP_DEFINE_CONST_FUN_OBJ_2(mps2_flash_open_obj, mps2_flash_open);

static mp_obj_t mps2_flash_size(mp_obj_t fd_in) {
    uint32_t args[1] = {mp_obj_get_int(fd_in)};
    return mp_obj_new_int((int32_t)semihost(SYS_FLEN, args));
}
static MP_DEFINE_CONST_FUN_OBJ_1(mps2_flash_size_obj, mps2_flash_size);

// One block transfer: seek the host file to off, then read into or write b;
// returns what semihosting says is left (bytes not transferred).
static uint32_t flash_io(uint32_t op, mp_obj_t fd_in, mp_obj_t off_in, mp_obj_t buf_in,
    mp_buffer_info_t *b) {
    mp_get_buffer_raise(buf_in, b, op == SYS_READ ? MP_BUFFER_WRITE : MP_BUFFER_READ);
    uint32_t fd = mp_obj_get_int(fd_in);
    uint32_t seek[2] = {fd, mp_obj_get_int(off_in)};
    if (semihost(SYS_SEEK, seek) != 0) {
        mp_raise_OSError(MP_EIO);
    }
    uint32_t args[3] = {fd, (uint32_t)b->buf, b->len};
    uint32_t left = semihost(op, args);
    if (left > b->len) {
        mp_raise_OSError(MP_EIO);
    }
    return left;
}

// flash_readinto(fd, offset, buf): bytes past the end of the file read as 0xff.
static mp_obj_t mps2_flash_readinto(mp_obj_t fd_in, mp_obj_t off_in, mp_obj_t buf_in) {
    mp_buffer_info_t b;
    uint32_t left = flash_io(SYS_READ, fd_in, off_in, buf_in, &b);
    memset((uint8_t *)b.buf + b.len - left, 0xff, left);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_3(mps2_flash_readinto_obj, mps2_flash_readinto);

static mp_obj_t mps2_flash_write(mp_obj_t fd_in, mp_obj_t off_in, mp_obj_t buf_in) {
    mp_buffer_info_t b;
    if (flash_io(SYS_WRITE, fd_in, off_in, buf_in, &b) != 0) {
        mp_raise_OSError(MP_EIO);
    }
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_3(mps2_flash_write_obj, mps2_flash_write);

static const mp_rom_map_elem_t mps2_globals_table[] = {
    { MP_ROM_QSTR(MP_QSTR___name__), MP_ROM_QSTR(MP_QSTR_mps2) },
    { MP_ROM_QSTR(MP_QSTR_uart_any), MP_ROM_PTR(&mps2_uart_any_obj) },
    { MP_ROM_QSTR(MP_QSTR_uart_read), MP_ROM_PTR(&mps2_uart_read_obj) },
    { MP_ROM_QSTR(MP_QSTR_uart_write), MP_ROM_PTR(&mps2_uart_write_obj) },
    { MP_ROM_QSTR(MP_QSTR_flash_open), MP_ROM_PTR(&mps2_flash_open_obj) },
    { MP_ROM_QSTR(MP_QSTR_flash_size), MP_ROM_PTR(&mps2_flash_size_obj) },
    { MP_ROM_QSTR(MP_QSTR_flash_readinto), MP_ROM_PTR(&mps2_flash_readinto_obj) },
    { MP_ROM_QSTR(MP_QSTR_flash_write), MP_ROM_PTR(&mps2_flash_write_obj) },
};
static MP_DEFINE_CONST_DICT(mps2_globals, mps2_globals_table);

const mp_obj_module_t mps2_module = {
    .base = { &mp_type_module },
    .globals = (mp_obj_dict_t *)&mps2_globals,
};
MP_REGISTER_MODULE(MP_QSTR_mps2, mps2_module);
