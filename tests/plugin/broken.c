/*
 * broken.c - plugins that must be refused, one per BROKEN_* define:
 *   BROKEN_VERSION    an api_version ddpsim does not speak
 *   BROKEN_NO_ENTRY   no ddpsim_impl_get symbol at all
 *   BROKEN_NULL_OPS   ddpsim_impl_get returns NULL
 *   BROKEN_CALLBACK   a callback left NULL
 */
#include <ddpsim_impl.h>
#include <stddef.h>

#ifndef BROKEN_NO_ENTRY
static int nop(void *state)
{
    (void)state;
    return 0;
}

static const ddpsim_impl_ops broken_ops = {
#ifdef BROKEN_VERSION
    .api_version = 99,
#else
    .api_version = DDPSIM_IMPL_API_VERSION,
#endif
    .name = "broken",
    .description = "a plugin ddpsim must refuse",
    .no_sync_enter = nop,
    .no_sync_exit = nop,
    .backward_end = nop,
    .zero_grad = nop,
    .step = nop,
};

const ddpsim_impl_ops *ddpsim_impl_get(void)
{
#ifdef BROKEN_NULL_OPS
    return (void)broken_ops, (const ddpsim_impl_ops *)NULL;
#else
    return &broken_ops;
#endif
}
#else
int ddpsim_not_an_entry(void);
int ddpsim_not_an_entry(void)
{
    return 0;
}
#endif
