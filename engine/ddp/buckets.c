/*
 * buckets.c - DDP's bucket assignment (buckets.h).
 */
#include "buckets.h"

int ddp_assign_buckets(const model *m, size_t first_cap, size_t cap, int *bucket_first, int *bucket_count, int max)
{
    size_t bytes[MODEL_MAX_PARAMS];
    for (int i = 0; i < model_nparams(m); i++)
        bytes[i] = model_param_at(m, i)->count * sizeof(float);
    return ddp_assign_buckets_bytes(bytes, model_nparams(m), first_cap, cap, bucket_first, bucket_count, max);
}

int ddp_fill_buckets(const size_t *bytes, int nparams, size_t first_cap, size_t cap, int *first, int *count)
{
    /* A parameter joins the open bucket first; the bucket closes once it holds at least its limit. */
    int n = 0, open_first = 0;
    size_t size = 0, limit = first_cap;
    for (int i = 0; i < nparams; i++) {
        size += bytes[i];
        if (size >= limit) {
            first[n] = open_first;
            count[n++] = i + 1 - open_first;
            open_first = i + 1;
            size = 0;
            limit = cap;
        }
    }
    if (open_first < nparams) {
        first[n] = open_first;
        count[n++] = nparams - open_first;
    }
    return n;
}

int ddp_assign_buckets_bytes(const size_t *bytes, int nparams, size_t first_cap, size_t cap, int *bucket_first,
                             int *bucket_count, int max)
{
    int first[MODEL_MAX_PARAMS], count[MODEL_MAX_PARAMS];
    int n = ddp_fill_buckets(bytes, nparams, first_cap, cap, first, count);
    /* Reversed: bucket 0 holds the last-registered parameters. */
    for (int k = 0; k < n && k < max; k++) {
        bucket_first[k] = first[n - 1 - k];
        bucket_count[k] = count[n - 1 - k];
    }
    return n;
}

int ddp_bucket_layout(const model *m, size_t first_cap, size_t cap, int find_unused, const int *order, int n,
                      int *members, int *sizes)
{
    int first[MODEL_MAX_PARAMS], count[MODEL_MAX_PARAMS], nb;
    if (!order && !find_unused) {
        /* No bucketing in the first iteration: one bucket, registration order. */
        for (int i = 0; i < model_nparams(m); i++)
            members[i] = i;
        sizes[0] = model_nparams(m);
        return 1;
    }
    if (!order) {
        nb = ddp_assign_buckets(m, first_cap, cap, first, count, MODEL_MAX_PARAMS);
        for (int k = 0, j = 0; k < nb; k++) {
            sizes[k] = count[k];
            for (int q = 0; q < count[k]; q++)
                members[j++] = first[k] + q;
        }
        return nb;
    }
    if (n < 0 || n > model_nparams(m))
        return -1;
    unsigned char seen[MODEL_MAX_PARAMS] = {0};
    size_t bytes[MODEL_MAX_PARAMS];
    for (int i = 0; i < n; i++) {
        if (order[i] < 0 || order[i] >= model_nparams(m) || seen[order[i]])
            return -1;
        seen[order[i]] = 1;
        bytes[i] = model_param_at(m, order[i])->count * sizeof(float);
    }
    nb = ddp_fill_buckets(bytes, n, first_cap, cap, first, count);
    for (int k = 0; k < nb; k++) {
        sizes[k] = count[k];
        for (int q = 0; q < count[k]; q++)
            members[first[k] + q] = order[first[k] + q];
    }
    return nb;
}
