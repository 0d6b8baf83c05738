/*
 * blas_pool.h - start ddpsim without OpenBLAS's thread pool.
 */
#ifndef DDPSIM_BLAS_POOL_H
#define DDPSIM_BLAS_POOL_H

/*
 * The first thing main does. When OpenBLAS's constructor started a pool of
 * worker threads (more than one thread, OPENBLAS_NUM_THREADS not 1), this
 * executes the program again, with the same arguments and
 * OPENBLAS_NUM_THREADS=1, and does not return; otherwise it returns at once.
 */
void blas_pool_restart_without(char **argv);

#endif
