/*
 * loss_norm.h - the trainer's loss normalization on ragged data (the token
 * model, lm; doc/SEMANTICS.md "Loss normalization").
 *
 * A window is the backwards from one zero_grad to the next: what .grad sums
 * before a step. Each backward's loss is the SUM of its micro-batch's valid
 * tokens' losses times a factor the trainer chooses; DDP then averages over
 * the N ranks. The factor that gives each intent, with T the window's valid
 * tokens on every rank, M its backwards and t this micro-batch's tokens:
 *
 *   global-tokens      N / T        the gradient of every token's loss over
 *                                   T: what one large batch would give
 *   micro-batch-mean   1 / (M t)    the mean of each micro-batch's mean
 *   sum                N            every token's loss, summed
 *
 * A micro-batch without a valid token contributes zero whatever the factor
 * (its positions are ignored, never multiplied, as torch's nll_loss does
 * with ignore_index): any factor is right there, even inf from a mean over
 * no tokens. A factor is an exact ratio of integers
 * (loss_ratio); a trainer computes it in float with one or two roundings
 * (N / T, or (1 / T) * N), so a factor f holds when |f - num/den| <=
 * 2.5 * 2^-24 * num/den (two roundings take at most (2u + u^2), u = 2^-24;
 * the test itself computes f * den in double, whose error, below 2^-53
 * relative, cannot move a factor from within 2u to outside 2.5u).
 *
 * The counts are a pure function of (seed, rank, batch) (model_row_tokens),
 * so every rank knows every rank's; a replay reads them from the recording
 * (loss_tokens, record.h tokens.json) instead. The windows are fixed by the
 * schedule: loss_windows holds, for one rank, what each of its backwards
 * is normalized by, and what the mistakes trainers make would give instead
 * (the candidates, named in a failure's pattern).
 */
#ifndef DDPSIM_LOSS_NORM_H
#define DDPSIM_LOSS_NORM_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "schedule.h"
#include "status.h"

typedef enum loss_norm { LOSS_NORM_NONE = 0, LOSS_NORM_GLOBAL_TOKENS, LOSS_NORM_MICRO_BATCH_MEAN,
                         LOSS_NORM_SUM } loss_norm;

/* "global-tokens", "micro-batch-mean", "sum" ("none" for LOSS_NORM_NONE). */
const char *loss_norm_name(loss_norm n);
/* DDP_ERR_INVALID naming the choices for anything else. */
ddp_status loss_norm_parse(const char *text, loss_norm *out);

/* A factor as the exact ratio num / den of two integers held exactly in doubles (den 0: undefined). */
typedef struct loss_ratio {
    double num, den;
} loss_ratio;

/* The factor's float, rounded once (num and den below 2^24, as every intended factor's are). */
float loss_ratio_float(loss_ratio q);
/* Whether f is q within two roundings (above); 0 for an undefined q or a non-finite f. */
int loss_ratio_holds(float f, loss_ratio q);

/* The mistakes a failing factor is matched against, with where each was seen (loss_cand_text). */
enum {
    LOSS_CAND_GLOBAL_TOKENS,  /* the intents, when another was asked for */
    LOSS_CAND_MICRO_BATCH_MEAN,
    LOSS_CAND_SUM,
    LOSS_CAND_RANK_WINDOW,    /* 1 / this rank's own tokens of the window */
    LOSS_CAND_UNNORMALIZED,   /* 1: the summed loss, DDP's average kept */
    LOSS_CAND_EMPTY_COUNTED,  /* N / (T + the sequences without a valid token) */
    LOSS_CAND_GEOMETRIC,      /* the intended times M^(k+1-M): the accumulated gradient rescaled every micro-step */
    LOSS_CAND_LOCAL_IF_ONE,   /* 1 / t in a window of one backward, the intended otherwise */
    LOSS_CAND_CONFIGURED_STEPS, /* 1 / (A t), A the longest window: a mean of means over the configured count */
    LOSS_CAND_COUNT
};
/* The mistake in words, with its source. */
const char *loss_cand_text(int cand);

typedef struct loss_windows {
    int nranks, rank, rows;
    size_t nbwd;             /* this rank's backwards, in op order */
    uint32_t *bwd_window;    /* [nbwd]: its window */
    uint32_t *bwd_micro;     /* [nbwd]: its place in the window */
    int *bwd_rows;           /* [nbwd * rows]: each sequence's valid tokens in its micro-batch on this rank */
    uint64_t *bwd_tokens;    /* [nbwd]: their sum */
    size_t nwin;
    uint32_t *win_first;     /* [nwin]: its first backward */
    uint32_t *win_micro_steps; /* [nwin]: its backwards */
    uint64_t *win_tokens;    /* [nwin]: valid tokens on every rank */
    uint64_t *win_empty;     /* [nwin]: sequences without a valid token on every rank */
    uint64_t *win_rank_tokens; /* [nwin]: this rank's valid tokens */
    uint32_t accumulation;   /* the longest window's backwards: a trainer's configured accumulation count */
} loss_windows;

/*
 * The windows of schedule s for `rank` of nranks on token model m with the data of seed. DDP_ERR_INVALID when
 * m has no token loss or s has uneven repetitions or join (a rank's windows would depend on what others ran);
 * DDP_ERR_NOMEM. loss_windows_free is safe on a zeroed or failed one.
 */
ddp_status loss_windows_build(loss_windows *lw, const sched *s, const model *m, uint64_t seed, int nranks, int rank);
void loss_windows_free(loss_windows *lw);

/* Counts that were given rather than generated (a recording's): every rank's backwards, each of `rows`
 * sequences, at counts[(rank * nbwd + b) * rows + j] (>= 0). */
typedef struct loss_tokens {
    int rows;
    size_t nbwd;
    const int *counts;
} loss_tokens;

/* loss_windows_build's windows on counts t (every rank ran nbwd backwards, DDP_ERR_INVALID when s has another
 * number, or uneven repetitions or join). */
ddp_status loss_windows_build_counted(loss_windows *lw, const sched *s, const loss_tokens *t, int nranks, int rank);

/* What backward b (in op order) should be multiplied by under n; what candidate c would have multiplied it by. */
loss_ratio loss_windows_intended(const loss_windows *lw, loss_norm n, size_t b);
loss_ratio loss_windows_candidate(const loss_windows *lw, loss_norm n, size_t b, int cand);
/* Whether factor f is right for backward b under n: the intended within two roundings, or any factor at all for a
 * micro-batch without a valid token. */
int loss_windows_holds(const loss_windows *lw, loss_norm n, size_t b, float f);
/* The candidates f matches at backward b, a bit each (1u << LOSS_CAND_...). */
unsigned loss_windows_matches(const loss_windows *lw, loss_norm n, size_t b, float f);

#endif
