/* SPDX-License-Identifier: MIT */
/* Several nodes (runtime/nodes.h): MPI's start and stop, and the driver's small collectives on a
 * communicator of their own (a duplicate of MPI_COMM_WORLD, which StarPU-MPI uses for the
 * gradients), so that the two never match each other's messages. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/env.h"
#include "base/sdp_log.h"
#include "runtime/nodes.h"

#include <starpu.h>
#ifdef SDP_HAVE_MPI
#include <mpi.h>
#include <starpu_mpi.h>
static MPI_Comm comm = MPI_COMM_NULL;
static int mpi_started;
#endif

static int node_idx, node_n = 1;
static char host[128];

/* A positive count from the environment variable `name`, or 0. */
static int env_count(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : 0;
}

int sdp_rt_nodes_launched(void)
{
    /* mpirun (OpenMPI), a PMI-2 launcher, or srun with PMIx (the step's task count) */
    int n = env_count("OMPI_COMM_WORLD_SIZE");
    if (n <= 0)
        n = env_count("PMI_SIZE");
    if (n <= 0 && getenv("PMIX_RANK"))
        n = env_count("SLURM_STEP_NUM_TASKS");
    return n > 1;
}

const char *sdp_rt_node_host(void)
{
    if (!host[0] && gethostname(host, sizeof(host) - 1) != 0)
        snprintf(host, sizeof(host), "%s", "?");
    return host;
}

int sdp_rt_node(void)
{
    return node_idx;
}

int sdp_rt_nnodes(void)
{
    return node_n;
}

int sdp_rt_nodes_starpu_init(void *conf)
{
#ifdef SDP_HAVE_MPI
    if (node_n > 1) /* MPI is up (sdp_rt_nodes_init): StarPU-MPI does not start it again */
        return starpu_mpi_init_conf(NULL, NULL, 0, MPI_COMM_WORLD, conf);
#endif
    return starpu_init(conf);
}

void sdp_rt_nodes_starpu_shutdown(void)
{
#ifdef SDP_HAVE_MPI
    if (node_n > 1) {
        starpu_mpi_shutdown();
        return;
    }
#endif
    starpu_shutdown();
}

#ifdef SDP_HAVE_MPI
static const char *level_name(int level)
{
    switch (level) {
    case MPI_THREAD_SINGLE:
        return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
        return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
        return "MPI_THREAD_SERIALIZED";
    default:
        return "MPI_THREAD_MULTIPLE";
    }
}

/* The thread level asked of MPI: MPI_THREAD_MULTIPLE, or the lower one a site pins with Open MPI's
 * OMPI_MPI_THREAD_LEVEL (0-3, the level its MPI_Init asks for), which is asked the same way: the
 * library's answer is then checked as any other MPI's (Open MPI gives the level asked). */
static int thread_level(void)
{
    const char *v = sdp_env("OMPI_MPI_THREAD_LEVEL");
    int level = v && *v ? atoi(v) : MPI_THREAD_MULTIPLE;
    return level >= MPI_THREAD_SINGLE && level < MPI_THREAD_MULTIPLE ? level : MPI_THREAD_MULTIPLE;
}

int sdp_rt_nodes_init(int *argc, char ***argv)
{
    int provided = 0;
    sdp_rt_node_host();
    if (!sdp_rt_nodes_launched())
        return 0;
    if (MPI_Init_thread(argc, argv, thread_level(), &provided) != MPI_SUCCESS)
        return sdp_err(-EIO, "%s: MPI_Init_thread failed", host);
    mpi_started = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &node_idx);
    MPI_Comm_size(MPI_COMM_WORLD, &node_n);
    sdp_log_set_node(node_idx);
    if (provided < MPI_THREAD_MULTIPLE) {
        sdp_err(-ENOTSUP,
                "process %d of %d (%s): the MPI library gives %s; a run over several nodes "
                "needs MPI_THREAD_MULTIPLE (its driver exchanges beside StarPU-MPI's thread)",
                node_idx, node_n, host, level_name(provided));
        sdp_hint("use an MPI built with thread support (Debian's OpenMPI has it)%s",
                 sdp_env("OMPI_MPI_THREAD_LEVEL") ? ", and unset OMPI_MPI_THREAD_LEVEL" : "");
        return -ENOTSUP;
    }
    if (MPI_Comm_dup(MPI_COMM_WORLD, &comm) != MPI_SUCCESS)
        return sdp_err(-EIO, "process %d (%s): MPI_Comm_dup failed", node_idx, host);
    return 0;
}

int sdp_rt_nodes_allgather(const double *mine, double *all, size_t n)
{
    if (node_n == 1) {
        memcpy(all, mine, n * sizeof(*mine));
        return 0;
    }
    if (MPI_Allgather(mine, (int)n, MPI_DOUBLE, all, (int)n, MPI_DOUBLE, comm) != MPI_SUCCESS)
        return sdp_err(-EIO, "node %d (%s): MPI_Allgather of %zu values failed", node_idx, host, n);
    return 0;
}

int sdp_rt_nodes_hosts(char *all, size_t len)
{
    char *mine = calloc(len, 1);
    int rc = 0;
    if (!mine)
        return sdp_err(-ENOMEM, "host names");
    snprintf(mine, len, "%s", sdp_rt_node_host());
    if (node_n == 1)
        memcpy(all, mine, len);
    else if (MPI_Allgather(mine, (int)len, MPI_CHAR, all, (int)len, MPI_CHAR, comm) != MPI_SUCCESS)
        rc = sdp_err(-EIO, "node %d (%s): MPI_Allgather of the host names failed", node_idx, host);
    free(mine);
    return rc;
}

int sdp_rt_nodes_allgather_u64(uint64_t mine, uint64_t *all)
{
    if (node_n == 1) {
        all[0] = mine;
        return 0;
    }
    if (MPI_Allgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, comm) != MPI_SUCCESS)
        return sdp_err(-EIO, "node %d (%s): MPI_Allgather failed", node_idx, host);
    return 0;
}

int sdp_rt_nodes_bcast(void *buf, size_t n)
{
    if (node_n == 1)
        return 0;
    if (MPI_Bcast(buf, (int)n, MPI_BYTE, 0, comm) != MPI_SUCCESS)
        return sdp_err(-EIO, "node %d (%s): MPI_Bcast of %zu bytes failed", node_idx, host, n);
    return 0;
}

int sdp_rt_nodes_max(int mine, int *max)
{
    *max = mine;
    if (node_n == 1)
        return 0;
    if (MPI_Allreduce(&mine, max, 1, MPI_INT, MPI_MAX, comm) != MPI_SUCCESS)
        return sdp_err(-EIO, "node %d (%s): MPI_Allreduce failed", node_idx, host);
    return 0;
}

int sdp_rt_nodes_pingpong(size_t bytes, int reps, double *gbs, double *latency_us)
{
    char *buf;
    double t[2] = { 0, 0 }, one[2];
    size_t sizes[2] = { 8, bytes };
    if (node_n < 2)
        return sdp_err(-EINVAL, "a ping-pong needs two nodes (this run has %d)", node_n);
    if (!(buf = calloc(bytes > 8 ? bytes : 8, 1)))
        return sdp_err(-ENOMEM, "ping-pong buffer of %zu bytes", bytes);
    for (int k = 0; k < 2; k++) { /* 8 bytes: the latency; `bytes`: the bandwidth */
        int n = (int)sizes[k];
        MPI_Barrier(comm);
        double t0 = MPI_Wtime();
        for (int i = 0; i < reps && node_idx < 2; i++) {
            if (node_idx == 0) {
                MPI_Send(buf, n, MPI_BYTE, 1, k, comm);
                MPI_Recv(buf, n, MPI_BYTE, 1, k, comm, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(buf, n, MPI_BYTE, 0, k, comm, MPI_STATUS_IGNORE);
                MPI_Send(buf, n, MPI_BYTE, 0, k, comm);
            }
        }
        one[k] = (MPI_Wtime() - t0) / (2.0 * reps); /* one way */
    }
    free(buf);
    /* node 0's figures for every node */
    if (MPI_Bcast(one, 2, MPI_DOUBLE, 0, comm) != MPI_SUCCESS)
        return sdp_err(-EIO, "node %d (%s): MPI_Bcast failed", node_idx, host);
    t[0] = one[0];
    t[1] = one[1] - one[0];
    *latency_us = t[0] * 1e6;
    *gbs = t[1] > 0 ? (double)bytes / t[1] / 1e9 : 0.0;
    return 0;
}

int sdp_rt_nodes_clock(double (*now)(void), double *offset_us)
{
    enum { TRIES = 8 };
    double mine = 0.0;
    *offset_us = 0.0;
    if (node_n == 1)
        return 0;
    for (int k = 1; k < node_n; k++) {
        double best_rtt = -1.0, off = 0.0, t;
        for (int i = 0; i < TRIES; i++) {
            if (node_idx == 0) {
                double t1 = now();
                MPI_Send(&t1, 1, MPI_DOUBLE, k, 100, comm);
                MPI_Recv(&t, 1, MPI_DOUBLE, k, 101, comm, MPI_STATUS_IGNORE);
                double t2 = now();
                if (best_rtt < 0 || t2 - t1 < best_rtt) {
                    best_rtt = t2 - t1;
                    off = 0.5 * (t1 + t2) - t;
                }
            } else if (node_idx == k) {
                MPI_Recv(&t, 1, MPI_DOUBLE, 0, 100, comm, MPI_STATUS_IGNORE);
                t = now();
                MPI_Send(&t, 1, MPI_DOUBLE, 0, 101, comm);
            }
        }
        if (node_idx == 0)
            MPI_Send(&off, 1, MPI_DOUBLE, k, 102, comm);
        else if (node_idx == k &&
                 MPI_Recv(&mine, 1, MPI_DOUBLE, 0, 102, comm, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return sdp_err(-EIO, "node %d (%s): the clock exchange failed", node_idx, host);
    }
    *offset_us = mine;
    return 0;
}

void sdp_rt_nodes_finalize(void)
{
    if (!mpi_started)
        return;
    if (comm != MPI_COMM_NULL)
        MPI_Comm_free(&comm);
    MPI_Finalize();
    mpi_started = 0;
}

void sdp_rt_nodes_abort(int code)
{
    if (mpi_started)
        MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

#else /* built without StarPU-MPI: one node */

int sdp_rt_nodes_init(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    sdp_rt_node_host();
    if (!sdp_rt_nodes_launched())
        return 0;
    sdp_err(-ENOTSUP,
            "this process was started by an MPI launcher with several processes, but slidedp "
            "is built without StarPU-MPI");
    sdp_hint("run tools/setup-debian.sh (OpenMPI, StarPU with StarPU-MPI), then ./configure "
             "(it finds StarPU-MPI) and make; or start one process");
    return -ENOTSUP;
}

int sdp_rt_nodes_allgather(const double *mine, double *all, size_t n)
{
    memcpy(all, mine, n * sizeof(*mine));
    return 0;
}

int sdp_rt_nodes_hosts(char *all, size_t len)
{
    snprintf(all, len, "%s", sdp_rt_node_host());
    return 0;
}

int sdp_rt_nodes_allgather_u64(uint64_t mine, uint64_t *all)
{
    all[0] = mine;
    return 0;
}

int sdp_rt_nodes_bcast(void *buf, size_t n)
{
    (void)buf;
    (void)n;
    return 0;
}

int sdp_rt_nodes_max(int mine, int *max)
{
    *max = mine;
    return 0;
}

int sdp_rt_nodes_pingpong(size_t bytes, int reps, double *gbs, double *latency_us)
{
    (void)bytes;
    (void)reps;
    *gbs = *latency_us = 0.0;
    return sdp_err(-EINVAL, "a ping-pong needs two nodes (this build runs one)");
}

int sdp_rt_nodes_clock(double (*now)(void), double *offset_us)
{
    (void)now;
    *offset_us = 0.0;
    return 0;
}

void sdp_rt_nodes_finalize(void)
{
}

void sdp_rt_nodes_abort(int code)
{
    exit(code);
}
#endif
