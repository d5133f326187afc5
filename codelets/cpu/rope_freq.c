/* SPDX-License-Identifier: MIT */
/* RoPE inverse frequencies and attention scaling of every rope_type the project implements, as
 * transformers' modeling_rope_utils.py computes them: default, llama3, yarn, linear and dynamic
 * (NTK-aware, grown for sequences beyond max_position_embeddings).  Computed in double and rounded
 * once to float, as sdp_cpu_rope_inv_freq does.  No allocation.
 * Test: tests/kernels/test_kernels_qknorm_rope.c (values from transformers). */
#include "config.h"

#include <math.h>

#include "codelets/cpu/rope.h"
#include "codelets/cpu/sdp_cpu_kernels.h"

/* yarn_get_mscale: 0.1 mscale ln(scale) + 1, 1 for scale <= 1 */
static double yarn_mscale(double scale, double mscale)
{
    return scale <= 1.0 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

/* find_correction_dim: the dimension whose wavelength turns num_rot times in len positions */
static double correction_dim(double num_rot, int dim, double base, double len)
{
    const double pi = 3.14159265358979323846;
    return (dim * log(len / (num_rot * 2 * pi))) / (2 * log(base));
}

/* _compute_yarn_parameters: extrapolated (unscaled) frequencies above the beta_fast band,
 * interpolated (divided by factor) below beta_slow's, a linear ramp between. */
static float yarn(float *inv_freq, const struct sdp_rope_params *p, int HD)
{
    const double bf = p->beta_fast != 0.0 ? p->beta_fast : 32.0;
    const double bs = p->beta_slow != 0.0 ? p->beta_slow : 1.0;
    const double len = p->original_max_pos > 0 ? p->original_max_pos : p->max_pos;
    double low = correction_dim(bf, HD, p->theta, len),
           high = correction_dim(bs, HD, p->theta, len);
    double af = p->attention_factor;

    if (!p->no_truncate) {
        low = floor(low);
        high = ceil(high);
    }
    low = low > 0 ? low : 0;
    high = high < HD - 1 ? high : HD - 1;
    if (low == high)
        high += 0.001; /* as transformers, against a division by zero */
    for (int i = 0; i < HD / 2; i++) {
        const double pos_freq = pow(p->theta, (double)(2 * i) / HD);
        double ramp = (i - low) / (high - low);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        const double extra = 1.0 - ramp; /* inv_freq_extrapolation_factor */
        inv_freq[i] =
            (float)(1.0 / (p->factor * pos_freq) * (1.0 - extra) + 1.0 / pos_freq * extra);
    }
    if (af == 0.0) {
        if (p->mscale != 0.0 && p->mscale_all_dim != 0.0)
            af = yarn_mscale(p->factor, p->mscale) / yarn_mscale(p->factor, p->mscale_all_dim);
        else
            af = yarn_mscale(p->factor, 1.0);
    }
    return (float)af;
}

float sdp_cpu_rope_freqs(float *inv_freq, const struct sdp_rope_params *p, int HD, int seq_len)
{
    double theta = p->theta;

    switch (p->kind) {
    case SDP_ROPE_KIND_LLAMA3:
        sdp_cpu_rope_inv_freq(inv_freq, HD, theta, p->factor, p->low_freq_factor,
                              p->high_freq_factor, p->original_max_pos);
        return 1.0f;
    case SDP_ROPE_KIND_YARN:
        return yarn(inv_freq, p, HD);
    case SDP_ROPE_KIND_DYNAMIC:
        if (seq_len > p->max_pos) /* the base grows; at or below max_pos it is theta */
            theta *=
                pow(p->factor * seq_len / p->max_pos - (p->factor - 1.0), (double)HD / (HD - 2));
        break;
    default:
        break;
    }
    for (int i = 0; i < HD / 2; i++) {
        double f = 1.0 / pow(theta, (double)(2 * i) / HD);
        if (p->kind == SDP_ROPE_KIND_LINEAR)
            f /= p->factor;
        inv_freq[i] = (float)f;
    }
    return 1.0f;
}
