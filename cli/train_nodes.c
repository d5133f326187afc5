/* SPDX-License-Identifier: MIT */
/* `slidedp train` over several nodes (runtime/nodes.h, docs/nodes.md): one process per node, the
 * recipe's ranks on each, the run's micro-batches dealt node after node.  Every node reads the
 * same inputs (a shared file system, as on a cluster); node 0 alone owns the run directory (its
 * lock, run.json, the metrics, the checkpoints, final/) and prints the progress, and the others
 * resume from the checkpoint node 0 chose.  The processes check at the start that they run the
 * same binary on the same recipe and arguments, with as many GPUs each, and agree after every step
 * on a stop. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/crc32c.h"
#include "base/sdp_log.h"
#include "codelets/sdp_tasks.h"
#include "cli/cli.h"
#include "cli/train_internal.h"
#include "runtime/init.h"
#include "runtime/nodes.h"
#include "runtime/trace.h"

/* The CRC-32C of a file's bytes (0 if it cannot be read: the comparison then names it). */
static uint32_t file_crc(const char *path)
{
    FILE *f = fopen(path, "rb");
    char buf[1 << 16];
    uint32_t crc = 0;
    size_t n;
    if (!f)
        return 0;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
        crc = sdp_crc32c(crc, buf, n);
    fclose(f);
    return crc;
}

/* Every node's value of `what` against node 0's: a mismatch is named, process and host, on node
 * 0 (the others fail quietly).  @return 0 or -EINVAL */
static int same_everywhere(uint64_t mine, const char *what, const char *fix)
{
    enum { HOST = 64 };
    int n = sdp_rt_nnodes(), bad = 0;
    uint64_t *all = calloc((size_t)n, sizeof(*all));
    char *hosts = calloc((size_t)n, HOST);
    if (!all || !hosts) {
        free(all);
        free(hosts);
        return sdp_err(-ENOMEM, "%d nodes' values", n);
    }
    if (sdp_rt_nodes_allgather_u64(mine, all) || sdp_rt_nodes_hosts(hosts, HOST))
        bad = -1;
    for (int i = 1; i < n && !bad; i++)
        if (all[i] != all[0]) {
            if (sdp_rt_node() == 0)
                sdp_err(-EINVAL,
                        "process %d of %d (on %s) runs with another %s than process 0 (on %s)", i,
                        n, hosts + (size_t)i * HOST, what, hosts);
            bad = 1;
        }
    if (bad > 0 && sdp_rt_node() == 0)
        sdp_hint("%s", fix);
    free(all);
    free(hosts);
    return bad < 0 ? -EIO : bad ? -EINVAL : 0;
}

int sdp_train_nodes_setup(struct sdp_train *t, uint32_t args_crc)
{
    struct sdp_recipe *r = t->r;
    int n = sdp_rt_nnodes(), ranks = r->ranks > 1 ? r->ranks : 1, nm;
    r->nodes = n;
    r->node = sdp_rt_node();
    if (n == 1)
        return SDP_EXIT_OK;
    if (same_everywhere(file_crc("/proc/self/exe"), "slidedp binary",
                        "install the same slidedp on every node") ||
        same_everywhere(((uint64_t)file_crc(r->file) << 32) | args_crc, "recipe or arguments",
                        "give every process the same recipe file and command line"))
        return SDP_EXIT_USAGE;
    nm = r->global_batch / r->micro_batch;
    if (nm % (n * ranks) != 0) {
        if (r->node == 0) {
            sdp_err(-EINVAL,
                    "recipe %s: %d micro-batches a step (batch.global %d / batch.micro %d) do not "
                    "divide among %d nodes of %d rank%s",
                    r->file, nm, r->global_batch, r->micro_batch, n, ranks, ranks > 1 ? "s" : "");
            sdp_hint("make batch.global / batch.micro a multiple of %d", n * ranks);
        }
        return SDP_EXIT_USAGE;
    }
    const char *refused = !strcmp(r->sched, "sdp-roundpipe") ? "--sched sdp-roundpipe"
                          : r->policy_auto                   ? "train.policy: auto"
                                                             : NULL;
    if (refused) {
        if (r->node == 0) {
            sdp_err(-EINVAL, "recipe %s: %s runs on one node; this run has %d", r->file, refused,
                    n);
            sdp_hint("drop it, or start one process");
        }
        return SDP_EXIT_USAGE;
    }
    if (r->node > 0) { /* node 0 reports, writes and prints for the run */
        static char events[SDP_PATH_MAX + 16], trace[SDP_PATH_MAX + 16];
        if (r->events) /* each node its log: node k's beside node 0's, as FILE.nodeK */
            snprintf(events, sizeof(events), "%s.node%d", r->events, r->node), r->events = events;
        if (r->trace)
            snprintf(trace, sizeof(trace), "%s.node%d", r->trace, r->node), r->trace = trace;
        r->metrics[0] = '\0';
        r->quiet = 1;
        if (sdp_log_verbosity < SDP_LOG_DEBUG)
            sdp_log_verbosity = SDP_LOG_WARN;
    }
    return SDP_EXIT_OK;
}

/* What node 0 tells the others of the run directory. */
struct rundir_msg {
    int status, resuming;
    char ckpath[sizeof(((struct sdp_train *)0)->ckpath)];
};

int sdp_train_nodes_rundir(struct sdp_train *t)
{
    struct rundir_msg m = { 0 };
    if (sdp_rt_node() == 0) {
        m.status = sdp_train_rundir_open(t);
        m.resuming = t->resuming;
        snprintf(m.ckpath, sizeof(m.ckpath), "%s", t->ckpath);
    }
    if (sdp_rt_nnodes() == 1)
        return m.status;
    if (sdp_rt_nodes_bcast(&m, sizeof(m)))
        return SDP_EXIT_FAILURE;
    if (m.status != SDP_EXIT_OK || sdp_rt_node() == 0)
        return m.status; /* reported on node 0 */
    /* the others resume what node 0 resumes, and write nothing */
    t->resuming = m.resuming;
    snprintf(t->ckpath, sizeof(t->ckpath), "%s", m.ckpath);
    if (t->r->output_dir[0]) /* node 0's: a stop is resumable; only node 0 writes there */
        snprintf(t->ckdir, sizeof(t->ckdir), "%s/checkpoints", t->r->output_dir);
    sdp_train_fingerprint(t);
    if (t->resuming && sdp_ckpt_read_info(t->ckpath, NULL, &t->info))
        return SDP_EXIT_FAILURE;
    return SDP_EXIT_OK;
}

int sdp_train_nodes_gpus(void)
{
    if (sdp_rt_nnodes() == 1)
        return SDP_EXIT_OK;
    return same_everywhere((uint64_t)sdp_rt_ncuda(), "GPU count (CUDA workers)",
                           "give every node as many GPUs (train.gpus, CUDA_VISIBLE_DEVICES)")
               ? SDP_EXIT_USAGE
               : SDP_EXIT_OK;
}

int sdp_train_nodes_trace(int ranks)
{
    double offset, base;
    if (sdp_rt_nnodes() == 1)
        return SDP_EXIT_OK;
    /* node k's times: (t - base_k) + shift = (t + offset) - base_0 */
    base = sdp_trace_base_us();
    if (sdp_rt_nodes_clock(sdp_trace_now_us, &offset) || sdp_rt_nodes_bcast(&base, sizeof(base)))
        return SDP_EXIT_FAILURE;
    sdp_trace_set_node(sdp_rt_node(), sdp_rt_node() * (ranks > 1 ? ranks : 1),
                       sdp_trace_base_us() + offset - base);
    return SDP_EXIT_OK;
}

int sdp_train_nodes_stop(int mine, int *stop)
{
    return sdp_rt_nodes_max(mine, stop) ? SDP_EXIT_FAILURE : SDP_EXIT_OK;
}

int sdp_train_nodes_exchange(const struct sdp_recipe *r)
{
    int wid[1], rc = -ENODEV, R = r->ranks > 1 ? r->ranks : 1;
    if (r->nodes <= 1)
        return SDP_EXIT_OK;
    if (r->grad_route_gpu && sdp_rt_ncuda() > 0) { /* rank 0's GPU to the next node's */
        if (sdp_rt_rank_workers(1, wid))
            return SDP_EXIT_FAILURE;
        rc = sdp_tasks_use_node_nccl(r->node, r->nodes, wid[0], sdp_rt_nodes_bcast);
        if (rc && rc != -ENODEV)
            return SDP_EXIT_FAILURE;
    }
    SDP_INFO("%d nodes (one process each) of %d rank%s: the gradient across the nodes in rank "
             "order, added %s, %s",
             r->nodes, R, R > 1 ? "s" : "",
             r->grad_route_gpu ? "on rank 0's worker" : "on the host",
             rc == 0 ? "sent by NCCL from GPU to GPU" : "sent by StarPU-MPI through host memory");
    return SDP_EXIT_OK;
}

int sdp_train_nodes_rows(const struct sdp_recipe *r, int *first)
{
    /* sdp_train_nodes_setup checked that the micro-batches divide among the nodes */
    int n = r->nodes > 1 ? r->nodes : 1, count = r->global_batch / n;
    *first = count * (n > 1 ? r->node : 0);
    return count;
}

int sdp_train_nodes_any(long long mine, int *any)
{
    return sdp_rt_nodes_max(mine > 0, any) ? -EIO : 0;
}
