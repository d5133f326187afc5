/* SPDX-License-Identifier: MIT */
/* Several nodes: one process per node, started by an MPI launcher (mpirun, srun), each with its
 * node's host copy of the masters and moments and its node's GPUs as ranks.  StarPU-MPI moves the
 * gradient chunks between the processes (codelets/node_xfer.c); the small exchanges of the
 * driver (losses, the stop flag, the start checks) are MPI collectives on a communicator of
 * their own, called from the main thread only.  Built only with StarPU-MPI (configure finds
 * starpumpi-1.4); without it, or without a launcher, a run is one node.  StarPU-free header.
 * docs/nodes.md. */
#ifndef SDP_NODES_H
#define SDP_NODES_H

#include <stddef.h>
#include <stdint.h>

/** Whether this process was started by an MPI launcher with more than one process (its
 * environment: OMPI_COMM_WORLD_SIZE, PMIX_SIZE or PMI_SIZE).  Before sdp_rt_nodes_init. */
int sdp_rt_nodes_launched(void);
/** Initialise MPI (MPI_THREAD_MULTIPLE: the main thread's collectives beside StarPU-MPI's own
 * thread) when launched; a no-op otherwise.  @return 0, -ENOTSUP (launched, but built without
 * StarPU-MPI, or an MPI without the thread level: logged naming the process and the fix) */
int sdp_rt_nodes_init(int *argc, char ***argv);
/** This process's index and the number of processes (0 and 1 when not launched). */
int sdp_rt_node(void);
int sdp_rt_nnodes(void);
/** The host name of this process, for messages. */
const char *sdp_rt_node_host(void);
/** Every node's `n` doubles into all[node * n + i], in node order.  @return 0 or -EIO (logged) */
int sdp_rt_nodes_allgather(const double *mine, double *all, size_t n);
/** Every node's host name (sdp_rt_node_host) into all[node * len], len bytes each, truncated.
 * @return 0 or -EIO (logged) */
int sdp_rt_nodes_hosts(char *all, size_t len);
/** Every node's 64-bit value into all[node].  @return 0 or -EIO (logged) */
int sdp_rt_nodes_allgather_u64(uint64_t mine, uint64_t *all);
/** Node 0's `n` bytes at buf into every node's buf.  @return 0 or -EIO (logged) */
int sdp_rt_nodes_bcast(void *buf, size_t n);
/** The largest of every node's value (a stop flag).  @return 0 or -EIO (logged) */
int sdp_rt_nodes_max(int mine, int *max);
/** Round-trip between node 0 and node 1 of a message of `bytes` bytes, `reps` times, main thread
 * (StarPU not started, or idle): the one-way bandwidth and latency.  Nodes other than 0 and 1
 * wait.  @return 0, -EINVAL (fewer than two nodes) or -EIO */
int sdp_rt_nodes_pingpong(size_t bytes, int reps, double *gbs, double *latency_us);
/** starpu_init, or in a run of several nodes StarPU-MPI's start over MPI_COMM_WORLD (conf: a
 * struct starpu_conf *).  @return StarPU's code */
int sdp_rt_nodes_starpu_init(void *conf);
/** starpu_shutdown, or StarPU-MPI's. */
void sdp_rt_nodes_starpu_shutdown(void);
/** What to add to this node's clock `now` (microseconds) to read node 0's: node 0 asks each node
 * for its time a few times and keeps the exchange of the shortest round trip (the error is at
 * most half of it).  Main thread.  @return 0 or -EIO (logged) */
int sdp_rt_nodes_clock(double (*now)(void), double *offset_us);
/** Stop MPI after StarPU (no-op when not launched). */
void sdp_rt_nodes_finalize(void);
/** End every process now (a failure on one node the others cannot recover from). */
void sdp_rt_nodes_abort(int code);

#endif
