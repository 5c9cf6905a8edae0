// Included by extmod/modtime.c (MICROPY_PY_TIME_INCLUDEFILE): time.time().
static mp_obj_t mp_time_time_get(void) {
    return mp_obj_new_int_from_ull(mp_hal_time_ns() / 1000000000ull);
}
