/*
 * fuzz_schedule.c - libFuzzer harness: the schedule parser on arbitrary text.
 * It must return DDP_OK or DDP_ERR_INVALID, never crash, leak or read out
 * of bounds; what it accepts must satisfy the schedule's invariants.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "input_text.h"
#include "schedule.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text(data, size, 0);
    if (!text)
        return 0;
    sched s;
    ddp_status st = sched_parse(text, &s);
    if (st == DDP_OK) {
        size_t fwd = 0, bwd = 0, grabs = 0;
        for (size_t i = 0; i < s.nops; i++) {
            if ((unsigned)s.ops[i] > OP_JOIN_EXIT)
                abort();
            fwd += s.ops[i] == OP_FWD;
            bwd += s.ops[i] == OP_BWD;
            grabs += s.ops[i] == OP_GRAB;
        }
        /* The empty schedule (and 0*(...)) is valid: it runs nothing. Only a backward can sync. */
        if (fwd != s.nfwd || grabs != s.ngrabs || s.nops > SCHED_MAX_OPS || s.nsyncs > bwd || bwd > fwd)
            abort();
        /* Uneven counts at a few world sizes: resolved or refused, and who runs what within them. */
        for (int n = 1; n <= 5; n += 2) {
            uint32_t *counts = malloc((s.nuneven ? s.nuneven : 1) * (size_t)n * sizeof *counts);
            if (counts && sched_resolve(&s, n, counts) == DDP_OK)
                for (size_t i = 0; i < s.nops; i++) {
                    int highest, k = sched_participants(&s, counts, n, i, NULL, &highest);
                    if (k < 1 || k > n || highest < 0 || highest >= n || !sched_runs(&s, counts, n, i, highest))
                        abort();
                }
            free(counts);
        }
        char(*labels)[SCHED_LABEL_LEN] = malloc((s.ngrabs ? s.ngrabs : 1) * sizeof *labels);
        if (labels)
            sched_grab_labels(&s, labels);
        free(labels);
        sched_free(&s);
    } else if (st != DDP_ERR_INVALID && st != DDP_ERR_NOMEM) {
        abort();
    }
    free(text);
    return 0;
}
