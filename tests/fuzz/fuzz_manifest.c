/*
 * fuzz_manifest.c - libFuzzer harness: the members dumps and recordings
 * share (engine/io/manifest.h), read from any text. The text must parse
 * as JSON or be refused; a manifest's "ddp", "zero_grad", "optimizer" and
 * "loss_scale" must be read or refused with DDP_ERR_INVALID, and what was
 * read must survive being written and read again unchanged; its "planted"
 * entries, against a fixed schedule of 4 ranks, must each name a backward
 * and a rank of the run. Never a crash, nothing leaked.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "input_text.h"
#include "json.h"
#include "manifest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NRANKS 4

/* What was read, written and read again: the same value of every field the first read said. */
static void round_trip(const ddp_config *d, manifest_ddp_fields said)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return;
    fprintf(f, "{\"x\": 0");
    manifest_write_ddp(f, d);
    fprintf(f, "}");
    fclose(f);
    json_value *root = NULL;
    if (json_parse(text, &root) != DDP_OK)
        abort(); /* the codec wrote what the parser refuses */
    ddp_config back;
    manifest_ddp_fields again;
    if (manifest_read_ddp("m", root, &back, &again) != DDP_OK ||
        manifest_ddp_compare("m", "fuzz", &back, d, said) != DDP_OK)
        abort(); /* written, it reads back as another value */
    json_free(root);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = fuzz_text(data, size, 4096);
    if (!buf)
        return 0;
    json_value *root = NULL;
    ddp_status s = json_parse(buf, &root);
    free(buf);
    if (s != DDP_OK) {
        if (s != DDP_ERR_INVALID && s != DDP_ERR_NOMEM)
            abort();
        return 0;
    }
    ddp_config d;
    manifest_ddp_fields said;
    s = manifest_read_ddp("m", root, &d, &said);
    if (s == DDP_OK)
        round_trip(&d, said);
    else if (s != DDP_ERR_INVALID)
        abort();
    sched sc;
    if (sched_parse("2*( nosync{fwd bwd} fwd bwd grab step zero )", &sc) != DDP_OK)
        abort();
    manifest_plant plants[MANIFEST_MAX_PLANTS];
    int n = -1;
    s = manifest_read_plants("m", root, &sc, NRANKS, plants, &n);
    if (s == DDP_OK) {
        if (n < 0 || n > MANIFEST_MAX_PLANTS)
            abort();
        for (int i = 0; i < n; i++)
            if (plants[i].rank < 0 || plants[i].rank >= NRANKS || plants[i].op >= sc.nops ||
                sc.ops[plants[i].op] != OP_BWD)
                abort(); /* a plant the run cannot have */
    } else if (s != DDP_ERR_INVALID) {
        abort();
    }
    sched_free(&sc);
    json_free(root);
    return 0;
}
