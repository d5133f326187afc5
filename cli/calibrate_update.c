/* SPDX-License-Identifier: MIT */
/* The host's update lane as the step runs it (cli/calibrate.h): the AdamW codelet on every CPU
 * worker of the runtime, over chunks of host tensors, with the bf16 gradient and working copy of
 * the standard workloads (28 B moved per parameter).  The host passes of cli/calibrate.c time the
 * same kernel on threads they start per pass; this times it where the step's update lane runs it
 * (StarPU's workers, bound to their cores, kept between tasks), and the step-time model takes the
 * larger of the two as the lane's rate.  UPD_N parameters in 8 chunks per worker, so that the
 * last wave leaves few workers idle; the median of REPS passes after an untimed one (which also
 * faults the pages in). */
#include "config.h"

#include <errno.h>
#include <stdint.h>

#include "base/sdp_log.h"
#include "base/splitmix.h"
#include "cli/calibrate.h"
#include "cli/cli.h"
#include "codelets/cpu/sdp_cpu_kernels.h"
#include "codelets/sdp_tasks.h"
#include "runtime/init.h"
#include "runtime/tensor.h"

#define UPD_N      ((size_t)32 << 20)
#define UPD_CHUNKS 8 /* per CPU worker */
#define REPS       3

struct upd {
    sdp_rt_tensor_t *p, *m, *v, *g, *w;
    int nc;
};

/* The state's tensors, cut into u->nc equal chunks, with typical values (AdamW on zeros is not
 * the kernel's usual work).  @return 0 or the runtime's error */
static int upd_create(struct upd *u, int nc)
{
    size_t parts[SDP_MACHINE_MAX_THREADS * UPD_CHUNKS];
    uint64_t x = 0x5eed;
    int rc;
    u->nc = nc;
    for (int c = 0; c < nc; c++)
        parts[c] = UPD_N * (size_t)(c + 1) / (size_t)nc - UPD_N * (size_t)c / (size_t)nc;
    rc = sdp_rt_tensor_create(&u->p, SDP_F32, UPD_N, "calibrate.update.master");
    if (!rc)
        rc = sdp_rt_tensor_create(&u->m, SDP_F32, UPD_N, "calibrate.update.m");
    if (!rc)
        rc = sdp_rt_tensor_create(&u->v, SDP_F32, UPD_N, "calibrate.update.v");
    if (!rc)
        rc = sdp_rt_tensor_create(&u->g, SDP_BF16, UPD_N, "calibrate.update.grad");
    if (!rc)
        rc = sdp_rt_tensor_create(&u->w, SDP_BF16, UPD_N, "calibrate.update.work");
    if (rc)
        return rc;
    float *p = sdp_rt_tensor_data(u->p), *m = sdp_rt_tensor_data(u->m);
    float *v = sdp_rt_tensor_data(u->v);
    uint16_t *g = sdp_rt_tensor_data(u->g);
    for (size_t i = 0; i < UPD_N; i++) {
        p[i] = sdp_splitmix_unit(&x);
        m[i] = 1e-3f * sdp_splitmix_unit(&x);
        v[i] = 1e-5f * (1.0f + sdp_splitmix_unit(&x));
        g[i] = sdp_f32_to_bf16(1e-2f * sdp_splitmix_unit(&x));
    }
    sdp_rt_tensor_t *all[] = { u->p, u->m, u->v, u->g, u->w };
    for (int i = 0; i < 5 && !rc; i++)
        rc = sdp_rt_tensor_partition(all[i], nc, parts);
    return rc;
}

static void upd_release(struct upd *u)
{
    sdp_rt_tensor_t *all[] = { u->p, u->m, u->v, u->g, u->w };
    for (int i = 0; i < 5; i++)
        if (all[i])
            sdp_rt_tensor_release(all[i]);
}

/* One pass: AdamW on every chunk, the tasks free to run on any CPU worker.  @return seconds, or
 * -1 on the runtime's error */
static double upd_pass(struct upd *u, int step)
{
    double t0 = sdp_cli_now_s();
    int rc = 0;
    for (int c = 0; c < u->nc && !rc; c++) {
        struct sdp_task_opts o = { 0 };
        struct sdp_adamw_segment seg = { 0, sdp_rt_tensor_nelems(sdp_rt_tensor_part(u->p, c)), 1,
                                         0 };
        o.hint.group = 1;
        o.hint.chunk = c;
        o.hint.mb = -1;
        o.hint.phase = SDP_PH_UPDATE;
        o.hint.stage_role = SDP_STAGE_NONE; /* no working copy leaves the host after it */
        rc = sdp_task_adamw_ex(&o, sdp_rt_tensor_part(u->p, c), sdp_rt_tensor_part(u->g, c),
                               sdp_rt_tensor_part(u->m, c), sdp_rt_tensor_part(u->v, c),
                               sdp_rt_tensor_part(u->w, c), NULL, 0, 1e-4, 0.9, 0.999, 1e-8, 0.1,
                               step, &seg, 1);
    }
    if (!rc)
        rc = sdp_rt_wait_all();
    return rc ? -1.0 : sdp_cli_now_s() - t0;
}

int sdp_cli_calibrate_update(struct sdp_machine *m)
{
    struct upd u = { 0 };
    const int workers = sdp_rt_ncpus();
    double s[REPS];
    int rc;
    if (workers < 1 || workers > SDP_MACHINE_MAX_THREADS)
        return 0; /* nothing to time, or more workers than the table holds: the passes stand */
    rc = upd_create(&u, workers * UPD_CHUNKS);
    for (int r = -1; !rc && r < REPS; r++) {
        double dt = upd_pass(&u, r + 2);
        if (dt <= 0.0)
            rc = -EIO;
        else if (r >= 0)
            s[r] = dt;
    }
    upd_release(&u);
    if (rc)
        return sdp_err(rc, "calibrate: AdamW on the runtime's %d CPU workers", workers);
    m->adamw_workers = workers;
    m->adamw_workers_bps = 28.0 * UPD_N / sdp_cli_median(s, REPS);
    SDP_INFO("calibrate: AdamW on the runtime's %d CPU workers: %.2f GB/s", workers,
             m->adamw_workers_bps / 1e9);
    return 0;
}
