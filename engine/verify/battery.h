/*
 * battery.h - the scenario battery: what `ddpsim --ranks N` runs when no
 * --schedule, --model or --scenario chooses a single run. Each scenario is
 * a model, a schedule and DDP options chosen to expose one class of bug;
 * together they cover accumulation windows of 1, 2, 3 and 5 micro-steps,
 * the no_sync edges, a sync right after a sync, zero_grad and step in
 * every place, ten syncs in a row, several buckets and their rebuild, odd
 * tensor sizes, gradient_as_bucket_view, find_unused_parameters, the
 * attention model, a single-element tensor and a run that ends inside a
 * window. Every scenario runs at the user's rank count and with the user's
 * other options; an option the user gave (--find-unused, --bucket-view,
 * --bucket-cap, --first-bucket-cap) wins over the scenario's.
 *
 * The catalogue (catalogue.h) runs the same battery on every catalogued bug.
 */
#ifndef DDPSIM_BATTERY_H
#define DDPSIM_BATTERY_H

#include <stddef.h>

#include "judge.h"
#include "schedule.h"
#include "verify.h"

typedef struct scenario {
    const char *name;
    const char *exposes;   /* the class of bug it exposes, in a line */
    const char *model;     /* NULL: the run's model */
    const char *schedule;
    int find_unused, bucket_view;
    size_t bucket_cap, first_bucket_cap; /* 0: the run's */
    int divisor;           /* scaling-order bugs (1/N before or after the sum, multiply or divide) show here
                            * only when N is not a power of two */
    int static_graph;      /* DDP(static_graph=True): the scenario needs it (the user's --static-graph sets it
                            * for every scenario) */
    int one_rank_groups;   /* sharded battery, HSDP only: a mesh of N x 1, every shard group one rank */
    float momentum;        /* the step's SGD momentum (0: plain SGD, or the user's --optimizer) */
    int adamw;             /* the step is torch.optim.AdamW's, its defaults (unless the user's --optimizer) */
    const char *loss_scale; /* GradScaler's loss scaling (scaler_parse's spec) unless the user's --loss-scale;
                             * NULL: the user's (none unless given) */
    int inf_bwd;           /* 0: none; else which backward (1: the first) overflows on the last rank (an inf) */
    int chaos_seeds;       /* the battery's chaos pass runs it under chaos seeds 1..chaos_seeds too (0: not): the
                            * order gradients become ready and buckets launch matters here */
} scenario;

/* The chaos pass's seeds for a scenario that has one: a few, within the battery's time. */
#define BATTERY_CHAOS_SEEDS 3

int battery_count(void);
const scenario *battery_at(int i);
/* The scenario called name, or NULL. */
const scenario *battery_find(const char *name);

/*
 * The battery of a sharding mode (--shard; SHARD_NONE: the plain one above):
 * accumulation windows of 1 and 3 with steps between, a sync onto a synced
 * shard, a step inside a window, sizes no shard group divides (padding),
 * several units with a remainder, a parameter exactly the unit cap, unused
 * parameters, buffers, the attention model, and for HSDP shard groups of one
 * rank. Each runs at the user's ranks and mesh.
 */
int battery_count_for(shard_mode mode);
const scenario *battery_at_for(shard_mode mode, int i);
const scenario *battery_find_for(shard_mode mode, const char *name);

/* Which DDP options the user gave explicitly: those keep the user's value in every scenario. */
typedef struct battery_given {
    int find_unused, bucket_view, bucket_cap, first_bucket_cap, optimizer, loss_scale;
} battery_given;

/*
 * Make run (a copy of the user's configuration) scenario sc's: its model,
 * schedule (parsed into s; sched_free it) and DDP options, except those in
 * given. DDP_ERR_INVALID for a schedule that does not parse (a bug here).
 */
ddp_status battery_apply(const scenario *sc, const battery_given *given, verify_config *run, sched *s);

typedef struct battery_outcome {
    ddp_status status;        /* DDP_OK: the run completed and was judged */
    int refused;              /* the implementation's create() refused this scenario's options (said why) */
    judge_verdict verdict;    /* when status is DDP_OK */
    size_t grabs, syncs;
    char first[1024];         /* what failed first (judge_summary), or the fault (with an implementation's path); "-" for a pass */
    judge_facts facts;        /* ... as fields, when a check diverged (judge_facts_of) */
    double wall_s;            /* the scenario's run, its ranks' start and end included */
    int interrupted;          /* the run was stopped by this signal (SIGINT, SIGTERM): stop, do not go on */
    /* Each rank's CPU time outside collectives over the ops and in its setup (verify_rank_cpu_ops_s, _setup_s)
     * when the run completed, else 0. */
    double rank_cpu_s[WORLD_MAX_RANKS], rank_setup_cpu_s[WORLD_MAX_RANKS];
} battery_outcome;

/*
 * 1 for an outcome that is neither a pass, nor "nothing verified", nor a
 * refusal: a divergence or a fault.
 */
int battery_failed(const battery_outcome *o);

/* Run scenario sc on top of base. */
void battery_run_one(const verify_config *base, const battery_given *given, const scenario *sc, battery_outcome *out);

#endif
