/*
 * faults.h - faults injected into a run (--fault SPEC) to show that ddpsim
 * notices them: a rank that crashes, aborts, hangs or runs slow, and a bit
 * flipped in a rank's contribution to an allreduce.
 *
 *   crash:rank=R,op=K   SIGKILL before op K
 *   abort:rank=R,op=K   abort() before op K (no core file)
 *   hang:rank=R,op=K    stop making progress before op K
 *   slow:rank=R,ms=M    sleep M ms before every op
 *   flip:rank=R,op=K    one bit of the rank's next allreduce contribution after op K
 *   inf:rank=R,op=K     an overflow: element 0 of the first gradient that completes in backward op K of rank R
 *   nan:rank=R,op=K     ... a NaN (both sides: a fault of the data, which loss scaling must catch and skip)
 */
#ifndef DDPSIM_FAULTS_H
#define DDPSIM_FAULTS_H

#include <stddef.h>

#include "manifest.h"
#include "status.h"

typedef enum fault_kind {
    FAULT_CRASH, FAULT_ABORT, FAULT_HANG, FAULT_SLOW, FAULT_FLIP, FAULT_INF, FAULT_NAN
} fault_kind;
#define FAULT_NKINDS 7

typedef struct verify_fault {
    fault_kind kind;
    int rank;
    long op;     /* the op index it strikes before (crash, abort, hang, flip) */
    unsigned ms; /* slow: added before every op of the rank */
} verify_fault;
#define VERIFY_MAX_FAULTS 16

/* "crash", "abort", ... */
const char *fault_kind_name(fault_kind k);

/* Parse one SPEC (above). DDP_ERR_INVALID with a message naming the field that is wrong. */
ddp_status fault_parse(const char *text, verify_fault *out);

/*
 * Strike, on rank `rank` before op `op`, every fault aimed there (crash,
 * abort and hang do not return). Returns 1 when a flip is due: the caller
 * hands it to the implementation under test's side (a bit flip is a fault of
 * the system under test, never of the reference).
 */
int faults_before_op(const verify_fault *faults, int nfaults, int rank, size_t op);

/* The inf or NaN planted into backward op `op` of rank `rank` (faults_plant_value); 0 when none is. */
int faults_planted(const verify_fault *faults, int nfaults, int rank, size_t op, float *value);

/* 1 when some fault plants an inf or a NaN. */
int faults_plant_any(const verify_fault *faults, int nfaults);

/* The infs and NaNs among faults as a manifest's "planted" (out: room for nfaults); how many. */
int faults_plants(const verify_fault *faults, int nfaults, manifest_plant *out);
/* A manifest's "planted" as faults (out: room for n). */
void faults_from_plants(const manifest_plant *plants, int n, verify_fault *out);

#endif
