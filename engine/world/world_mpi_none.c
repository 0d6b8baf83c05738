/*
 * world_mpi_none.c - the MPI world where ddpsim was built without MPI: it
 * says how to get one.
 */
#include <stdio.h>

#include "world_impl.h"

#define NOT_BUILT                                                                                                     \
    "ddpsim was built without MPI: install Open MPI (Debian: apt-get install openmpi-bin libopenmpi-dev) and run "   \
    "./configure --with-mpi"

int world_mpi_built(void) { return 0; }

void world_mpi_describe(char *buf, size_t len)
{
    snprintf(buf, len, "not built (--world mpi needs ./configure --with-mpi and Open MPI)");
}
int world_mpi_active(void) { return 0; }
int world_mpi_rank(void) { return -1; }
int world_mpi_size(void) { return 0; }
int world_mpi_local_rank(void) { return 0; }
int world_mpi_local_size(void) { return 1; }

ddp_status world_mpi_start(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return ddp_error(DDP_ERR_INVALID, NOT_BUILT);
}

int world_mpi_finish(int code) { return code; }

ddp_status world_mpi_attach(world *w)
{
    (void)w;
    return ddp_error(DDP_ERR_INVALID, NOT_BUILT);
}

void world_mpi_detach(world *w) { (void)w; }

ddp_status world_mpi_supervise(world *w, const sigset_t *watched, pid_t pid)
{
    (void)w;
    (void)watched;
    (void)pid;
    return ddp_error(DDP_ERR_INVALID, NOT_BUILT);
}
