/*
 * mpi_allreduce.c - the Open MPI baseline for `ddpsim bench allreduce`:
 * times an in-place float MPI_Allreduce (sum) the way ddpsim times its own
 * (a barrier, then the allreduce; per iteration the slowest rank; the median
 * over iterations after warm-up) and checks the result.
 *   mpicc -O2 -o mpi_allreduce mpi_allreduce.c
 *   mpirun --oversubscribe -np 4 ./mpi_allreduce 16777216 20
 * Prints "<bytes> <median_us> <wrong>" on rank 0.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long bytes = argc > 1 ? atol(argv[1]) : 16 << 20;
    int iters = argc > 2 ? atoi(argv[2]) : 20, warmup = 3;
    long count = bytes / (long)sizeof(float);
    float *buf = malloc((size_t)count * sizeof(float));
    double *t = malloc((size_t)iters * sizeof(double));
    if (!buf || !t || count < 1 || iters < 1)
        MPI_Abort(MPI_COMM_WORLD, 2);
    long wrong = 0;
    for (int it = -warmup; it < iters; it++) {
        for (long i = 0; i < count; i++)
            buf[i] = (float)((i * 7 + rank * 13) % 1025 - 512); /* integers: exact sums */
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double mine = MPI_Wtime() - t0, slowest;
        MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (it >= 0)
            t[it] = slowest * 1e6;
        if (it == iters - 1)
            for (long i = 0; i < count; i++) {
                double want = 0;
                for (int r = 0; r < size; r++)
                    want += (double)((i * 7 + r * 13) % 1025 - 512);
                wrong += buf[i] != (float)want;
            }
    }
    long total_wrong;
    MPI_Reduce(&wrong, &total_wrong, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        qsort(t, (size_t)iters, sizeof *t, cmp);
        printf("%ld %.1f %ld\n", bytes, t[iters / 2], total_wrong);
    }
    free(buf);
    free(t);
    MPI_Finalize();
    return 0;
}
