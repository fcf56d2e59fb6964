#ifndef CRUNTIMEHOOK_SHIM_H
#define CRUNTIMEHOOK_SHIM_H

/* Atomic access to a hook slot that another library (the Swift runtime) owns: Swift's own atomics
   need storage they allocate, so the compare-and-exchange on a foreign pointer-sized slot is done
   here. */

/* Stores `hook` into `*slot` only if the slot is empty; returns 1 when it did, 0 when another hook
   was there first (which is then left in place). */
static inline int brick_hook_install_if_empty(void **slot, void *hook) {
    void *expected = 0;
    return __atomic_compare_exchange_n(slot, &expected, hook, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

/* The hook in `*slot` now (0 when none). */
static inline void *brick_hook_load(void **slot) {
    return __atomic_load_n(slot, __ATOMIC_ACQUIRE);
}

#endif
