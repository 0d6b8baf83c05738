/*
 * scaler.h - loss scaling as torch's GradScaler does it (torch 1.13
 * torch/cuda/amp/grad_scaler.py; torch 2.x torch/amp/grad_scaler.py, whose
 * CPU kernels, aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp, keep the
 * CUDA ones' arithmetic, aten/src/ATen/native/cuda/AmpKernels.cu):
 *
 *   scale(loss)   the loss times the scale: every gradient of the backward
 *                 is the scale times the unscaled one
 *   unscale_      inv_scale = (float)(1 / (double)scale) (grad_scaler.py
 *                 line 279: "FP32 division can be imprecise ... so we carry
 *                 out the reciprocal in FP64"); found_inf = 1 when any
 *                 element of any gradient is inf or NaN; every element
 *                 times inv_scale (_amp_foreach_non_finite_check_and_unscale_,
 *                 which leaves the values as they are when inv_scale is 1)
 *   step          the optimizer's step unless found_inf (_maybe_opt_step)
 *   update        found_inf: scale * backoff, the growth tracker to 0; else
 *                 the tracker + 1, and when it reaches growth_interval
 *                 scale * growth (kept only when finite) and the tracker
 *                 to 0 (_amp_update_scale_)
 *
 * Defaults: init 2^16, growth 2, backoff 0.5, interval 2000. ddpsim takes
 * scales and factors that are powers of two (GradScaler's defaults are):
 * multiplying by one commutes with every rounding of the backward, the
 * accumulation, the reduction and the unscale, so the scaled gradients are
 * exactly the scale times the unscaled ones and an unscaled gradient is
 * bit for bit what the run would hold without scaling (outside overflow
 * and the subnormal range; doc/SEMANTICS.md "Loss scaling").
 *
 * A static scale (--loss-scale S) is GradScaler's unscale, inf check and
 * skip with a scale that never changes (Megatron-LM's ConstantGradScaler).
 */
#ifndef DDPSIM_SCALER_H
#define DDPSIM_SCALER_H

#include <stddef.h>

#define SCALER_INIT 65536.0f /* 2^16, GradScaler's init_scale */
#define SCALER_GROWTH 2.0
#define SCALER_BACKOFF 0.5
#define SCALER_INTERVAL 2000

typedef struct scaler_config {
    int on;                 /* loss scaling asked for */
    int dynamic;            /* GradScaler's update after every step; 0: a static scale */
    float init;             /* the first scale */
    double growth, backoff; /* powers of two, growth > 1 > backoff */
    int interval;           /* growth_interval, at least 1 */
} scaler_config;

typedef struct scaler_state {
    float scale;
    int tracker; /* GradScaler's _growth_tracker: unskipped steps since the last change */
} scaler_state;

/*
 * "S" (a static scale) or "dynamic[:INIT[,GROWTH[,BACKOFF[,INTERVAL]]]]" into *out (GradScaler's defaults for what
 * is left out). 0, or -1 with why in err.
 */
int scaler_parse(const char *spec, scaler_config *out, char *err, size_t errlen);

/* The spec back as scaler_parse reads it, every field spelled out ("dynamic:65536,2,0.5,2000"). */
void scaler_format(const scaler_config *c, char *buf, size_t len);

/* A scaler at its first scale. */
void scaler_start(const scaler_config *c, scaler_state *s);

/* GradScaler's reciprocal: (float)(1 / (double)scale). */
float scaler_inv_scale(float scale);

/* unscale_ of n floats: 1 when any of them is inf or NaN (before the product), and each times inv_scale. */
int scaler_unscale(float *g, size_t n, float inv_scale);

/* update after a step taken (found_inf 0) or skipped (1); a static scale stays as it is. */
void scaler_update(const scaler_config *c, scaler_state *s, int found_inf);

/* 1 when x is a power of two (2^-149 .. 2^127 in float, 2^-1074 .. 2^1023 in double). */
int scaler_power_of_two(double x);

#endif
