/* SPDX-License-Identifier: MIT */
/* The environment variables the project reads: one table, and the readers (base/env.h).  Recipe
 * keys and flags are the user's interface; these are switches for measuring and debugging, and
 * the few variables of StarPU and Slurm the project reads itself. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/sdp_log.h"

const struct sdp_env_var sdp_env_vars[] = {
    { "SDP_ATTENTION", "cudnn (default where built) | own",
      "attention on the GPU through cuDNN's fused kernels or the project's own" },
    { "SDP_ATTENTION_WS_MIB",
      "MiB (default: what the plan leaves of the GPU limit; 1024 without one)",
      "cap on cuDNN attention's workspace, in place of the plan's budget; larger batches fewer "
      "calls" },
    { "SDP_LMHEAD_BLOCK_MIB", "MiB (default chosen by the GPU's limit)",
      "size of the LM head's logits block on a GPU" },
    { "SDP_LMHEAD_THREADS", "count (default: the CPU workers)",
      "threads of one LM head task on CPU workers" },
    { "SDP_LMHEAD_LOGITS", "bf16 (default for bf16 weights) | f32",
      "dtype of the LM head's logits" },
    { "SDP_HOST_KERNELS", "auto (default) | avx512 | scalar", "which host kernels run" },
    { "SDP_GPU_CENSUS", "0 (default) | 1",
      "slidedp bench logs what holds each GPU's memory after its last step" },
    { "SDP_SYNC", "0 (default) | 1", "every task synchronous (hunting dependency bugs)" },
    { "SDP_EMBED_DEFER", "on (default) | off",
      "the tied embedding's late rows deferred past the next step's lookups" },
    { "SDP_ROWS_PACK", "on (default) | off",
      "the embedding's gradient packed by the rows the step selects (off: the whole group)" },
    { "SDP_CHUNK_PIPELINE", "off (default) | auto | on",
      "the chunk pipeline: working copies to the compute and fp32 gradients back chunk by chunk "
      "(auto: when the compute runs on a GPU; on: CPU workers too; off: whole groups)" },
    { "SDP_MOE_ROUTED", "on (default) | off",
      "routed streaming: a sparse layer's experts cross to the GPU only when routed (off: every "
      "expert, the ablation; on CPU workers with SDP_CHUNK_PIPELINE=on)" },
    { "SDP_POISON_COMPUTE_COPY", "0 (default) | 1",
      "a compute copy's fetch (the chunk pipeline's) first fills the whole copy with NaN, so that "
      "a read of a range no fetch or copy wrote shows in the losses (tests)" },
    { "SDP_GPU_UPDATE_WRITEBACK", "0 (default) | 1",
      "masters and moments of GPU updates written back to the host after each update" },
    { "SDP_STAGING_DEPTH", "chunks (default: one per CPU worker)",
      "sdp-slidedp: host updates staged at once (train.staging_depth overrides)" },
    { "SDP_WINDOW_DEPTH", "groups (default 2)",
      "sdp-slidedp: parameter groups fetched ahead (train.prefetch_groups overrides)" },
    { "SDP_STAGE_BUFFERS", "buffers (default 4 per staging slot)",
      "sdp-slidedp: staging buffers for host updates" },
    { "SDP_FETCH_EAGER", "0 (default) | 1",
      "sdp-slidedp: fetch weights as soon as a worker idles" },
    { "SDP_FETCH_IDLE_ANY_MS", "ms (default 50)",
      "sdp-slidedp: idle time after which a CUDA worker runs any fetch, not only its window's" },
    { "SDP_HOST_PREFETCH", "1 (default) | 0",
      "sdp-slidedp: prefetch host updates' data into the staging buffers" },
    { "SDP_LPT_FETCH", "0 (default) | 1",
      "sdp-roundpipe: a stage's weight uploads longest first (0: group by group)" },
    { "SDP_SIM_BINARY", "a path (default build/sim/slidedp beside slidedp)",
      "slidedp simulate: the simulation build's program" },
    { "SDP_SIM_MACHINE", "a machine file (set by slidedp simulate --machine)",
      "the simulation build: the codelets' rates" },
    { "SDP_SIM_HOST_MEM", "bytes (set by slidedp simulate)",
      "the simulation build: the described machine's host memory, for the memory checks" },
    { "STARPU_LIMIT_CUDA_MEM", "MiB (set from train.gpu_memory_gib)",
      "StarPU's GPU memory limit; below 20 GiB kernels pick smaller workspaces" },
    { "STARPU_SILENT", "1 (set unless given)", "StarPU's banner" },
    { "STARPU_MINIMUM_CLEAN_BUFFERS", "a percentage (0, set unless given, without a GPU limit)",
      "StarPU's write-back of dirty buffers ahead of eviction" },
    { "STARPU_TARGET_CLEAN_BUFFERS", "a percentage (0, set unless given, without a GPU limit)",
      "StarPU's write-back of dirty buffers ahead of eviction" },
    { "STARPU_NCPU", "CPU workers (StarPU's; overrides train.cpus)",
      "capped at the cores the process may use, with a warning" },
    { "SLURM_JOB_ID", "set by Slurm", "the run's log names the job" },
    { "OMPI_MPI_THREAD_LEVEL", "0-3 (Open MPI's; unset: 3, MPI_THREAD_MULTIPLE)",
      "over several nodes: the MPI thread level asked for; below 3 the run is refused" },
    { "SLURM_CPUS_PER_TASK", "set by Slurm", "the CPU workers default to the job's cores" },
    { "PATH", "the shell's", "slidedp plot looks for gnuplot on it" },
    { "SDP_CACHE_DIR", "a directory (default $XDG_CACHE_HOME/slidedp, else ~/.cache/slidedp)",
      "where train.policy auto keeps its chosen plans" },
    { "XDG_CACHE_HOME", "the desktop's", "the cache's parent when SDP_CACHE_DIR is unset" },
    { "HOME", "the login's", "~/.cache/slidedp when neither of the two is set" },
    { NULL, NULL, NULL },
};

const char *sdp_env(const char *name)
{
    for (const struct sdp_env_var *v = sdp_env_vars; v->name; v++)
        if (!strcmp(v->name, name))
            return getenv(name);
    SDP_ASSERT(0, "environment variable %s is read but not listed in base/env.c", name);
    return NULL;
}

long sdp_env_long(const char *name, long dflt)
{
    const char *s = sdp_env(name);
    char *end;
    if (!s || !*s)
        return dflt;
    long v = strtol(s, &end, 10);
    return *end ? dflt : v;
}

double sdp_env_double(const char *name, double dflt)
{
    const char *s = sdp_env(name);
    char *end;
    if (!s || !*s)
        return dflt;
    double v = strtod(s, &end);
    return *end ? dflt : v;
}

int sdp_env_is(const char *name, const char *value)
{
    const char *s = sdp_env(name);
    return s && !strcmp(s, value);
}
