/*
 * layers.h - the layers ddpsim's CPU models are made of, as free functions
 * in the style of llm.c: outputs first, then inputs and weights, dimensions
 * last. Backward functions ACCUMULATE (+=) into every gradient they write,
 * parameter and activation gradients alike; zeroing is the caller's job.
 * The losses' backward is the exception: it starts the chain and writes (=).
 *
 * Dimension letters:
 *   N  rows (batch * time, flattened)     In, Out  in / out features of a linear
 *   B  batch   T  time (sequence)   C  channels   V  vocabulary size
 *
 * Layout follows PyTorch so gradients match a torch run one to one:
 * a linear weight is [Out, In] and y = x * W^T + b.
 * Everything is float32; reductions that feed a loss value use double.
 * Not here: parameters' storage and names (model.h), data (data.h).
 */
#ifndef DDPSIM_LAYERS_H
#define DDPSIM_LAYERS_H

#include <stddef.h>

/* Pin OpenBLAS to one thread in this process (reproducible, no oversubscription). */
void layers_blas_single_thread(void);

/*
 * Address space OpenBLAS maps at a process's first product: its work buffer, BUFFER_SIZE = 32 << 22 bytes on
 * x86_64 (OpenBLAS common_x86_64.h), plus what malloc adds when mmap refuses it (seen: 135266304 asked).
 * 0 under portable math, which does not call OpenBLAS. A mapping that fails there is retried forever
 * (OpenBLAS 0.3.21 blas_memory_alloc), so a run checks this room before it starts (engine/verify/run.c).
 */
size_t layers_blas_buffer_bytes(void);

/* The threads OpenBLAS runs a product on now: above 1 when its library constructor started a pool. */
int layers_blas_threads(void);

/*
 * Portable math (on != 0): the matrix products below run in ddpsim's own kernels, whose order of additions is
 * the code's and contracts nothing, instead of OpenBLAS, whose kernel (and so the bits) depends on the CPU.
 * Process-wide; set before the first forward.
 */
void layers_set_portable(int on);
/* What computes the products, for headers and manifests: "OpenBLAS 0.3.21, kernel Haswell" or
 * "portable (...)". Returns buf. */
const char *layers_math(char *buf, size_t len);

/* out[N,Out] = inp[N,In] * weight[Out,In]^T + bias[Out]; bias may be NULL. cblas_sgemm. */
void linear_forward(float *out, const float *inp, const float *weight, const float *bias, int N, int In, int Out);
/* dinp[N,In] += dout*W, dweight[Out,In] += dout^T*inp, dbias[Out] += sum_n dout; dinp, dbias may be NULL. */
void linear_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                     const float *weight, int N, int In, int Out);
/* The same two with plain loops: the reference the sgemm versions are tested against. */
void linear_forward_naive(float *out, const float *inp, const float *weight, const float *bias, int N, int In,
                          int Out);
void linear_backward_naive(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                           const float *weight, int N, int In, int Out);

/* Elementwise activations over n values. Backward gets the forward input. */
void relu_forward(float *out, const float *inp, size_t n);
void relu_backward(float *dinp, const float *dout, const float *inp, size_t n);
void tanh_forward(float *out, const float *inp, size_t n);
void tanh_backward(float *dinp, const float *dout, const float *out, size_t n); /* uses the OUTPUT */
/* GELU, exact: x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)) (PyTorch approximate='none'). */
void gelu_erf_forward(float *out, const float *inp, size_t n);
void gelu_erf_backward(float *dinp, const float *dout, const float *inp, size_t n);
/* GELU, tanh approximation (PyTorch approximate='tanh'). */
void gelu_tanh_forward(float *out, const float *inp, size_t n);
void gelu_tanh_backward(float *dinp, const float *dout, const float *inp, size_t n);

/* out = a + b over n values; backward: da += dout, db += dout. */
void residual_forward(float *out, const float *a, const float *b, size_t n);
void residual_backward(float *da, float *db, const float *dout, size_t n);

/*
 * LayerNorm over the last dimension (eps 1e-5, biased variance, as PyTorch).
 * mean[N] and rstd[N] are saved for backward.
 */
void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                       const float *bias, int N, int C);
void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                        const float *weight, const float *mean, const float *rstd, int N, int C);

/*
 * BatchNorm1d in train mode over N rows of C channels (eps 1e-5, as
 * PyTorch): each channel normalised with its batch mean and BIASED
 * variance; the running statistics move by `momentum` towards the batch's
 * mean and UNBIASED variance (N / (N - 1)), in place:
 *   running = (1 - momentum) * running + momentum * batch statistic.
 * The statistics accumulate in double. mean[C] and rstd[C] are saved for
 * backward. N >= 2 (PyTorch refuses one value per channel in training).
 */
void batchnorm_forward(float *out, float *mean, float *rstd, float *running_mean, float *running_var,
                       const float *inp, const float *weight, const float *bias, int N, int C, float momentum);
void batchnorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                        const float *weight, const float *mean, const float *rstd, int N, int C);

/* out[B*T, C] = wte[tokens[b,t]] + wpe[t]; wpe may be NULL (no position embedding). */
void embedding_forward(float *out, const int *tokens, const float *wte, const float *wpe, int B, int T, int C);
void embedding_backward(float *dwte, float *dwpe, const float *dout, const int *tokens, int B, int T, int C);

/*
 * Single-head causal self-attention core: att[B,T,T] = softmax(q k^T / sqrt(C))
 * with future positions masked, out[B,T,C] = att v. q, k, v are [B,T,C].
 * Backward needs a [B,T,T] scratch (datt) and accumulates into dq, dk, dv.
 */
void attention_forward(float *out, float *att, const float *q, const float *k, const float *v, int B, int T,
                       int C);
void attention_backward(float *dq, float *dk, float *dv, float *datt, const float *dout, const float *att,
                        const float *q, const float *k, const float *v, int B, int T, int C);

/*
 * Mean squared error, reduction 'mean' as torch.nn.MSELoss: returns
 * sum((pred - target)^2) / n (accumulated in double); backward writes
 * dpred = (pred - target) * (2 / n), PyTorch's order of operations.
 */
double mse_forward(const float *pred, const float *target, size_t n);
void mse_backward(float *dpred, const float *pred, const float *target, size_t n);

/*
 * Softmax cross-entropy over V classes for N rows, reduction 'mean' as
 * torch.nn.CrossEntropyLoss: returns mean of -log softmax(logits)[target].
 * probs[N,V] is saved for backward, which writes dlogits = (probs - onehot) / N.
 * A target outside 0..V-1 makes the forward return NaN.
 */
double crossentropy_forward(float *probs, const float *logits, const int *targets, int N, int V);
void crossentropy_backward(float *dlogits, const float *probs, const int *targets, int N, int V);
/*
 * The token loss (lm): positions whose target is LAYERS_IGNORE_TARGET (torch's ignore_index, -100) are left
 * out; the forward returns the SUM over the others (reduction="sum"), and the backward seeds each kept position
 * with (probs - onehot) * factor, which is what autograd gives for factor * sum: the trainer's normalization.
 * Ignored positions get exactly 0, whatever the factor.
 */
#define LAYERS_IGNORE_TARGET (-100)
double crossentropy_sum_forward(float *probs, const float *logits, const int *targets, int N, int V);
void crossentropy_sum_backward(float *dlogits, const float *probs, const int *targets, int N, int V, float factor);

#endif
