/*
 * loss_norm.c - the trainer's loss normalization on ragged data (loss_norm.h).
 */
#include "loss_norm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[] = {"none", "global-tokens", "micro-batch-mean", "sum"};

const char *loss_norm_name(loss_norm n)
{
    return (unsigned)n < sizeof names / sizeof names[0] ? names[n] : "?";
}

ddp_status loss_norm_parse(const char *text, loss_norm *out)
{
    for (int i = LOSS_NORM_GLOBAL_TOKENS; i <= LOSS_NORM_SUM; i++)
        if (strcmp(text, names[i]) == 0) {
            *out = (loss_norm)i;
            return DDP_OK;
        }
    return ddp_error(DDP_ERR_INVALID, "--loss-norm: '%s' is not global-tokens, micro-batch-mean or sum", text);
}

float loss_ratio_float(loss_ratio q)
{
    return (float)q.num / (float)q.den;
}

int loss_ratio_holds(float f, loss_ratio q)
{
    if (!(q.den > 0) || !isfinite(f))
        return 0;
    /* 2.5 u with u = 2^-24: num * 2.5 * 2^-24 is exact for an integer num below 2^50 */
    return fabs((double)f * q.den - q.num) <= q.num * 2.5 * 0x1p-24;
}

static const char *const cand_texts[LOSS_CAND_COUNT] = {
    [LOSS_CAND_GLOBAL_TOKENS] = "global-tokens's factor, N / (the window's valid tokens on every rank)",
    [LOSS_CAND_MICRO_BATCH_MEAN] =
        "each micro-batch's own token mean over the window's micro-steps, 1 / (micro-steps x its tokens): "
        "a mean of micro-batch means (torchtitan before PR #2206; open-instruct PR #1137's former masked_mean / "
        "accumulation_steps; verl #5625 with equal micro-batches)",
    [LOSS_CAND_SUM] = "N: every token's loss summed over the ranks (sum's factor; where another was intended, the "
                      "token normalizer applied after backward and DDP's average undone, gradients global tokens "
                      "times too large: pytorch/torchtitan #2972)",
    [LOSS_CAND_RANK_WINDOW] =
        "1 / this rank's own valid tokens of the window: a rank-local mean, then DDP's average (torchtitan's "
        "local_rank_loss_sum / local_total_tokens before PR #2206; PrimeIntellect-ai/prime-rl PR #1961)",
    [LOSS_CAND_UNNORMALIZED] = "1: the summed loss without its token normalizer, DDP's average kept (gradients "
                               "global tokens / N times too large: radixark/miles PR #3231)",
    [LOSS_CAND_EMPTY_COUNTED] = "N / (the window's valid tokens + its sequences without any): an empty sequence "
                                "counted as one token (clamp_min(1) per sample: radixark/miles PR #2796)",
    [LOSS_CAND_GEOMETRIC] =
        "the intended factor times M^(k+1-M) for micro-step k of M: the accumulated gradient divided by M after "
        "every micro-step, an exponential moving average instead of a sum (pytorch/torchtitan #1733, PR #1732)",
    [LOSS_CAND_LOCAL_IF_ONE] =
        "1 / this micro-batch's own tokens in a window of one micro-step, the intended factor in longer ones: the "
        "rescale skipped when accumulation is 1, which cancels only when every rank has the same tokens "
        "(meta-pytorch/torchtune PR #2980)",
    [LOSS_CAND_CONFIGURED_STEPS] =
        "1 / (A x this micro-batch's tokens), A the configured accumulation count (the run's longest window), also "
        "in a shorter window at an epoch's end: its gradient scaled by M / A (Lightning-AI/pytorch-lightning "
        "#19987)",
};

const char *loss_cand_text(int cand)
{
    return cand >= 0 && cand < LOSS_CAND_COUNT ? cand_texts[cand] : "?";
}

void loss_windows_free(loss_windows *lw)
{
    free(lw->bwd_window);
    free(lw->bwd_micro);
    free(lw->bwd_rows);
    free(lw->bwd_tokens);
    free(lw->win_first);
    free(lw->win_micro_steps);
    free(lw->win_tokens);
    free(lw->win_empty);
    free(lw->win_rank_tokens);
    memset(lw, 0, sizeof *lw);
}

/* Where a builder takes the counts of rank r's backward b, whose batch is the latest forward's. */
typedef void (*rows_fn)(const void *ctx, int r, size_t b, uint64_t batch, int *rows);

static ddp_status build(loss_windows *lw, const sched *s, int B, int nranks, int rank, rows_fn rows_of,
                        const void *ctx)
{
    if (s->nuneven || s->njoins)
        return ddp_error(DDP_ERR_INVALID, "--loss-norm: a schedule with uneven repetitions or join{...} is not "
                                          "modelled (each rank's windows would depend on what the others ran)");
    lw->nranks = nranks;
    lw->rank = rank;
    lw->rows = B;
    size_t nbwd = 0, nwin = 1;
    for (size_t i = 0; i < s->nops; i++) {
        nbwd += s->ops[i] == OP_BWD;
        nwin += s->ops[i] == OP_ZERO;
    }
    lw->bwd_window = calloc(nbwd + 1, sizeof *lw->bwd_window);
    lw->bwd_micro = calloc(nbwd + 1, sizeof *lw->bwd_micro);
    lw->bwd_rows = calloc((nbwd + 1) * (size_t)B, sizeof *lw->bwd_rows);
    lw->bwd_tokens = calloc(nbwd + 1, sizeof *lw->bwd_tokens);
    lw->win_first = calloc(nwin, sizeof *lw->win_first);
    lw->win_micro_steps = calloc(nwin, sizeof *lw->win_micro_steps);
    lw->win_tokens = calloc(nwin, sizeof *lw->win_tokens);
    lw->win_empty = calloc(nwin, sizeof *lw->win_empty);
    lw->win_rank_tokens = calloc(nwin, sizeof *lw->win_rank_tokens);
    int *rows = malloc(((size_t)B + 1) * sizeof *rows);
    if (!lw->bwd_window || !lw->bwd_micro || !lw->bwd_rows || !lw->bwd_tokens || !lw->win_first ||
        !lw->win_micro_steps || !lw->win_tokens || !lw->win_empty || !lw->win_rank_tokens || !rows) {
        free(rows);
        loss_windows_free(lw);
        return ddp_error(DDP_ERR_NOMEM, "--loss-norm: the windows of %zu backwards", nbwd);
    }
    size_t b = 0, w = 0, forwards = 0;
    for (size_t i = 0; i < s->nops; i++) {
        if (s->ops[i] == OP_FWD)
            forwards++;
        else if (s->ops[i] == OP_ZERO && lw->win_micro_steps[w]) /* a zero_grad after another closes no window */
            lw->win_first[++w] = (uint32_t)b;
        else if (s->ops[i] == OP_ZERO)
            lw->win_first[w] = (uint32_t)b;
        if (s->ops[i] != OP_BWD)
            continue;
        if (!forwards) {
            free(rows);
            loss_windows_free(lw);
            return ddp_error(DDP_ERR_INVALID, "--loss-norm: op %zu is a backward before any forward", i);
        }
        lw->bwd_window[b] = (uint32_t)w;
        lw->bwd_micro[b] = lw->win_micro_steps[w]++;
        for (int r = 0; r < nranks; r++) {
            rows_of(ctx, r, b, forwards - 1, rows); /* the batch of the latest forward (rank.c live_batch's) */
            for (int j = 0; j < B; j++) {
                lw->win_tokens[w] += (uint64_t)rows[j];
                lw->win_empty[w] += rows[j] == 0;
                if (r != rank)
                    continue;
                lw->bwd_rows[b * (size_t)B + (size_t)j] = rows[j];
                lw->bwd_tokens[b] += (uint64_t)rows[j];
                lw->win_rank_tokens[w] += (uint64_t)rows[j];
            }
        }
        b++;
    }
    free(rows);
    lw->nbwd = b;
    lw->nwin = w + 1;
    for (size_t i = 0; i < lw->nwin; i++)
        if (lw->win_micro_steps[i] > lw->accumulation)
            lw->accumulation = lw->win_micro_steps[i];
    return DDP_OK;
}

typedef struct generated {
    const model *m;
    uint64_t seed;
} generated;

static void generated_rows(const void *ctx, int r, size_t b, uint64_t batch, int *rows)
{
    const generated *g = ctx;
    (void)b;
    model_row_tokens(g->m, g->seed, r, batch, rows);
}

ddp_status loss_windows_build(loss_windows *lw, const sched *s, const model *m, uint64_t seed, int nranks, int rank)
{
    memset(lw, 0, sizeof *lw);
    if (!model_has_token_loss(m))
        return ddp_error(DDP_ERR_INVALID, "--loss-norm needs the token model: --model lm");
    generated g = {m, seed};
    return build(lw, s, model_batch_rows(m), nranks, rank, generated_rows, &g);
}

static void counted_rows(const void *ctx, int r, size_t b, uint64_t batch, int *rows)
{
    const loss_tokens *t = ctx;
    (void)batch;
    memcpy(rows, t->counts + ((size_t)r * t->nbwd + b) * (size_t)t->rows, (size_t)t->rows * sizeof *rows);
}

ddp_status loss_windows_build_counted(loss_windows *lw, const sched *s, const loss_tokens *t, int nranks, int rank)
{
    memset(lw, 0, sizeof *lw);
    size_t nbwd = 0;
    for (size_t i = 0; i < s->nops; i++)
        nbwd += s->ops[i] == OP_BWD;
    if (nbwd != t->nbwd || t->rows < 1)
        return ddp_error(DDP_ERR_INVALID, "--loss-norm: counts of %zu backwards of %d sequences for a schedule of "
                                          "%zu backwards", t->nbwd, t->rows, nbwd);
    return build(lw, s, t->rows, nranks, rank, counted_rows, t);
}

static loss_ratio ratio(double num, double den)
{
    return (loss_ratio){num, den};
}

loss_ratio loss_windows_intended(const loss_windows *lw, loss_norm n, size_t b)
{
    uint32_t w = lw->bwd_window[b];
    switch (n) {
    case LOSS_NORM_GLOBAL_TOKENS: return ratio(lw->nranks, (double)lw->win_tokens[w]);
    case LOSS_NORM_MICRO_BATCH_MEAN: return ratio(1, (double)lw->win_micro_steps[w] * (double)lw->bwd_tokens[b]);
    case LOSS_NORM_SUM: return ratio(lw->nranks, 1);
    default: return ratio(1, 1);
    }
}

loss_ratio loss_windows_candidate(const loss_windows *lw, loss_norm n, size_t b, int cand)
{
    uint32_t w = lw->bwd_window[b];
    double M = lw->win_micro_steps[w], t = (double)lw->bwd_tokens[b];
    loss_ratio want = loss_windows_intended(lw, n, b);
    switch (cand) {
    case LOSS_CAND_GLOBAL_TOKENS: return loss_windows_intended(lw, LOSS_NORM_GLOBAL_TOKENS, b);
    case LOSS_CAND_MICRO_BATCH_MEAN: return loss_windows_intended(lw, LOSS_NORM_MICRO_BATCH_MEAN, b);
    case LOSS_CAND_SUM: return loss_windows_intended(lw, LOSS_NORM_SUM, b);
    case LOSS_CAND_RANK_WINDOW: return ratio(1, (double)lw->win_rank_tokens[w]);
    case LOSS_CAND_UNNORMALIZED: return ratio(1, 1);
    case LOSS_CAND_EMPTY_COUNTED: return ratio(lw->nranks, (double)(lw->win_tokens[w] + lw->win_empty[w]));
    case LOSS_CAND_GEOMETRIC: return ratio(want.num, want.den * pow(M, M - 1 - lw->bwd_micro[b]));
    case LOSS_CAND_LOCAL_IF_ONE: return M == 1 ? ratio(1, t) : want;
    case LOSS_CAND_CONFIGURED_STEPS: return ratio(1, (double)lw->accumulation * t);
    default: return ratio(0, 0);
    }
}

int loss_windows_holds(const loss_windows *lw, loss_norm n, size_t b, float f)
{
    if (lw->bwd_tokens[b] == 0) /* no token to weigh: every position's gradient is exactly 0 whatever the factor, */
        return 1;               /* inf or NaN too (the ignored positions are never multiplied, as in torch's nll_loss) */
    return loss_ratio_holds(f, loss_windows_intended(lw, n, b));
}

unsigned loss_windows_matches(const loss_windows *lw, loss_norm n, size_t b, float f)
{
    unsigned mask = 0;
    for (int c = 0; c < LOSS_CAND_COUNT; c++)
        if (loss_ratio_holds(f, loss_windows_candidate(lw, n, b, c)))
            mask |= 1u << c;
    return mask;
}
