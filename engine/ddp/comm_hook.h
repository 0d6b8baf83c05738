/*
 * comm_hook.h - PyTorch DDP's built-in communication hooks, bit for bit
 * (torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py, PyTorch
 * 1.13; registered with DistributedDataParallel.register_comm_hook).
 *
 * With a hook registered the reducer copies each gradient into its bucket
 * unscaled (reducer.cpp mark_variable_ready_dense divides only when no hook
 * is registered, and with gradient_as_bucket_view does not divide the view
 * either); the hook does the rest:
 *
 *   allreduce_hook      buffer.div_(N), then a sum-allreduce in float;
 *   fp16_compress_hook  buffer.to(float16).div_(N), a sum-allreduce in
 *                       float16, then copied back into the float bucket;
 *   bf16_compress_hook  the same in bfloat16 (1.13 refuses it without CUDA
 *                       11 and NCCL 2.10: ddpsim models it all the same).
 *
 * Every rounding as PyTorch does it on the CPU: float to float16 or
 * bfloat16 to nearest, ties to even; the division in float, then rounded
 * to the format (checked against torch 1.13: h.div_(N) equals
 * half(float(h) / N)). A sum in the format adds in float and rounds each
 * partial sum to the format (gloo's float16 addition); in ddpsim's ordered
 * algorithm that is rank 0 + rank 1, then + rank 2, ...; in exact, the exact
 * sum rounded once. The ring order is not modelled for the compressed formats.
 */
#ifndef DDPSIM_COMM_HOOK_H
#define DDPSIM_COMM_HOOK_H

#include <stddef.h>

#include "status.h"

typedef enum ddp_comm_hook {
    DDP_HOOK_NONE = 0,  /* no hook: the reducer's own fl(1/N) * grad while copying in, then the sum */
    DDP_HOOK_ALLREDUCE, /* allreduce_hook */
    DDP_HOOK_FP16,      /* fp16_compress_hook */
    DDP_HOOK_BF16,      /* bf16_compress_hook */
} ddp_comm_hook;

/* "none", "allreduce", "fp16", "bf16". */
ddp_status ddp_comm_hook_parse(const char *name, ddp_comm_hook *out);
const char *ddp_comm_hook_name(ddp_comm_hook h);
/* The hook's wire format is narrower than float (fp16, bf16). */
int ddp_comm_hook_compresses(ddp_comm_hook h);

/* x rounded to float16 (bfloat16 for DDP_HOOK_BF16) to nearest even, as a float (exact); NaN and Inf kept. */
float comm_hook_round(float x, ddp_comm_hook h);
/* The same from a double, rounded once (an exact sum); the general path comm_hook_round must agree with. */
float comm_hook_round_double(double x, ddp_comm_hook h);
/* What the hook does to a bucket before its collective: x / N (allreduce), round(round(x) / N) (fp16, bf16). */
void comm_hook_compress(float *buf, size_t n, int nranks, ddp_comm_hook h);
/*
 * The compressed sum: gathered holds every rank's compressed bucket, rank
 * after rank (nranks * n values). out[i] = the sum over ranks in rank order,
 * each partial sum rounded to the format (exact = 0), or the exact sum
 * rounded once (exact = 1).
 */
/* A compressing hook's bucket is gathered and summed this many elements at a time (bounded memory at any N). */
#define COMM_HOOK_CHUNK ((size_t)1 << 18)

void comm_hook_sum_gathered(const float *gathered, int nranks, size_t n, ddp_comm_hook h, int exact, float *out);
/*
 * One rounding to the hook's wire format: at most u * |x| + eta away
 * (u = 2^-11, eta = 2^-25 for float16, whose subnormals are coarse;
 * u = 2^-8, eta = 2^-134 for bfloat16). 0 and 0 for no compression.
 */
void comm_hook_unit(ddp_comm_hook h, double *u, double *eta);

#endif
