// SPDX-License-Identifier: MIT
/* Causal grouped-query attention through cuDNN's fused flash-attention graphs (cudnn_frontend,
 * header-only, over cuDNN's backend API): the same contract as sdp_cuda_attention_fwd/bwd (fused
 * qkv (B*T, (NH + 2 NKV) HD), out (B*T, NH*HD), lse (B, NH, T) natural log-sum-exp of the scaled
 * scores), in bf16 only.  Q, K, V, O, dQ, dK, dV are strided views of the packed rows, so nothing
 * is copied; a batch whose backward workspace would pass SDP_ATTENTION_WS_MIB runs in sub-batches.
 * The graphs are built once per shape and thread (a StarPU CUDA worker keeps its
 * device), with one cuDNN handle per thread.  Test: tests/kernels/test_cuda_attention.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include <cudnn_frontend.h>

#include "codelets/cuda/sdp_cuda_kernels.h"

namespace fe = cudnn_frontend;

namespace
{

enum : int64_t { UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV };

struct plan {
    int bwd, B, T, NH, NKV, HD;
    std::shared_ptr<fe::graph::Graph> g; /* null: cuDNN has no engine for this shape */
    int64_t ws;
};

/* the sub-batch chosen for a whole batch (see pick), null plan when cuDNN cannot run it */
struct choice {
    int bwd, B, T, NH, NKV, HD, bs;
    plan *p;
};

struct thread_state {
    cudnnHandle_t handle = nullptr;
    int device = -1;
    std::deque<plan> plans; /* a deque: the pointers in choices stay valid as plans are added */
    std::vector<choice> choices;
    char err[512] = "";
    ~thread_state()
    {
        choices.clear();
        plans.clear();
        if (handle)
            cudnnDestroy(handle);
    }
};

thread_local thread_state ts;

void set_err(const char *what, const std::string &msg)
{
    snprintf(ts.err, sizeof(ts.err), "%s: %s", what, msg.c_str());
}

bool ensure_handle(void)
{
    int dev = -1;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        set_err("cudaGetDevice", "no current device");
        return false;
    }
    if (ts.handle && ts.device != dev) { /* plans are per device */
        ts.choices.clear();
        ts.plans.clear();
        cudnnDestroy(ts.handle);
        ts.handle = nullptr;
    }
    if (!ts.handle) {
        const cudnnStatus_t st = cudnnCreate(&ts.handle);
        if (st != CUDNN_STATUS_SUCCESS) {
            ts.handle = nullptr;
            set_err("cudnnCreate", cudnnGetErrorString(st));
            return false;
        }
        ts.device = dev;
    }
    return true;
}

/* (b, h, t, d) view of a head block of packed rows of width ld */
fe::graph::Tensor_attributes view(const char *name, int64_t uid, int B, int H, int T, int HD,
                                  int64_t ld)
{
    return fe::graph::Tensor_attributes()
        .set_name(name)
        .set_uid(uid)
        .set_dim({ B, H, T, HD })
        .set_stride({ (int64_t)T * ld, HD, ld, 1 });
}

std::shared_ptr<fe::graph::Graph> build(int bwd, int B, int T, int NH, int NKV, int HD)
{
    const int64_t QKV = (int64_t)(NH + 2 * NKV) * HD, C = (int64_t)NH * HD;
    const float scale = (float)(1.0 / sqrt((double)HD));
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    auto Q = g->tensor(view("Q", UID_Q, B, NH, T, HD, QKV));
    auto K = g->tensor(view("K", UID_K, B, NKV, T, HD, QKV));
    auto V = g->tensor(view("V", UID_V, B, NKV, T, HD, QKV));
    const std::vector<int64_t> sdim = { B, NH, T, 1 }, sstr = { (int64_t)NH * T, T, 1, 1 };
    if (!bwd) {
        auto opt = fe::graph::SDPA_attributes()
                       .set_name("sdpa_fwd")
                       .set_generate_stats(true)
                       .set_causal_mask(true)
                       .set_attn_scale(scale);
        auto [O, stats] = g->sdpa(Q, K, V, opt);
        O->set_output(true)
            .set_uid(UID_O)
            .set_dim({ B, NH, T, HD })
            .set_stride({ (int64_t)T * C, HD, C, 1 });
        stats->set_output(true)
            .set_uid(UID_STATS)
            .set_data_type(fe::DataType_t::FLOAT)
            .set_dim(sdim)
            .set_stride(sstr);
    } else {
        auto O = g->tensor(view("O", UID_O, B, NH, T, HD, C));
        auto dO = g->tensor(view("dO", UID_DO, B, NH, T, HD, C));
        auto stats = g->tensor(fe::graph::Tensor_attributes()
                                   .set_name("stats")
                                   .set_uid(UID_STATS)
                                   .set_dim(sdim)
                                   .set_stride(sstr)
                                   .set_data_type(fe::DataType_t::FLOAT));
        auto opt = fe::graph::SDPA_backward_attributes()
                       .set_name("sdpa_bwd")
                       .set_causal_mask(true)
                       .set_attn_scale(scale);
        auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, stats, opt);
        dQ->set_output(true)
            .set_uid(UID_DQ)
            .set_dim({ B, NH, T, HD })
            .set_stride({ (int64_t)T * QKV, HD, QKV, 1 });
        dK->set_output(true)
            .set_uid(UID_DK)
            .set_dim({ B, NKV, T, HD })
            .set_stride({ (int64_t)T * QKV, HD, QKV, 1 });
        dV->set_output(true)
            .set_uid(UID_DV)
            .set_dim({ B, NKV, T, HD })
            .set_stride({ (int64_t)T * QKV, HD, QKV, 1 });
    }
    fe::error_t e = g->build(ts.handle, { fe::HeurMode_t::A });
    if (!e.is_good()) {
        set_err(bwd ? "cuDNN SDPA backward graph" : "cuDNN SDPA forward graph", e.get_message());
        return nullptr;
    }
    return g;
}

plan *find(int bwd, int B, int T, int NH, int NKV, int HD)
{
    if (B <= 0 || T <= 0 || NH <= 0 || NKV <= 0 || NH % NKV || HD <= 0) {
        set_err("shape", "B, T, NH, NKV, HD must be positive and NH a multiple of NKV");
        return nullptr;
    }
    if (!ensure_handle())
        return nullptr;
    for (plan &p : ts.plans)
        if (p.bwd == bwd && p.B == B && p.T == T && p.NH == NH && p.NKV == NKV && p.HD == HD)
            return p.g ? &p : nullptr;
    plan p = { bwd, B, T, NH, NKV, HD, build(bwd, B, T, NH, NKV, HD), 0 };
    if (p.g && !p.g->get_workspace_size(p.ws).is_good()) {
        set_err("cuDNN SDPA", "no workspace size");
        p.g = nullptr;
    }
    ts.plans.push_back(p); /* a failure is remembered: no rebuild per call */
    return ts.plans.back().g ? &ts.plans.back() : nullptr;
}

int run(plan *p, std::unordered_map<int64_t, void *> &pack, void *ws, cudaStream_t s)
{
    cudnnStatus_t st = cudnnSetStream(ts.handle, s);
    if (st != CUDNN_STATUS_SUCCESS) {
        set_err("cudnnSetStream", cudnnGetErrorString(st));
        return -1;
    }
    fe::error_t e = p->g->execute(ts.handle, pack, ws);
    if (!e.is_good()) {
        set_err("cuDNN SDPA execute", e.get_message());
        return -1;
    }
    return 0;
}

/* The default cap on the backward's workspace: 1 GiB, or 128 MiB under a GPU memory limit below
 * 20 GiB (sdp_cuda_small_gpu_limit), where the workspace is taken from the data StarPU may keep.
 * The workspace grows by about 32 MiB a sequence at qwen3-4b's heads and 1024 tokens; larger
 * calls are faster per layer (bench/results/2026-12-02-h200-kernels.md). */
#define ATTN_WS_MIB         1024.0
#define ATTN_LIMITED_WS_MIB 128.0

/* The sequences per cuDNN call: the largest divisor of B whose workspace fits the cap
 * (SDP_ATTENTION_WS_MIB, default above; the backward's grows with B).  Sequences are independent,
 * so a call per sub-batch computes the same values; the sub-batches run one after the other on
 * the stream and share the workspace.  The choice is made once per shape and thread. */
plan *pick(int bwd, int B, int T, int NH, int NKV, int HD, int *bs_out)
{
    static const double cap_mib = [] {
        const double dflt = sdp_cuda_small_gpu_limit() ? ATTN_LIMITED_WS_MIB : ATTN_WS_MIB;
        const double m = sdp_env_double("SDP_ATTENTION_WS_MIB", dflt);
        return m > 0 ? m : dflt;
    }();
    if (B <= 0) { /* no sub-batch to ask find() about */
        set_err("shape", "B, T, NH, NKV, HD must be positive and NH a multiple of NKV");
        return nullptr;
    }
    if (!ensure_handle()) /* also drops the choices of another device */
        return nullptr;
    for (const choice &c : ts.choices)
        if (c.bwd == bwd && c.B == B && c.T == T && c.NH == NH && c.NKV == NKV && c.HD == HD) {
            *bs_out = c.bs;
            return c.p;
        }
    choice c = { bwd, B, T, NH, NKV, HD, 0, nullptr };
    for (int bs = B; bs >= 1; bs--) {
        if (B % bs)
            continue;
        plan *p = find(bwd, bs, T, NH, NKV, HD);
        if (!p) { /* no engine for this sub-batch: the batch falls back */
            c.p = nullptr;
            break;
        }
        c.p = p;
        c.bs = bs;
        if ((double)p->ws <= cap_mib * 1048576.0)
            break;
    }
    ts.choices.push_back(c);
    *bs_out = c.bs;
    return c.p;
}

/* Runs the forward (writes out, lse) or the backward (reads out, lse, dout; writes dqkv) of B
 * sequences in calls of the chosen sub-batch, each call on views offset to its first sequence. */
int run_batches(int bwd, const void *qkv, void *out, float *lse, const void *dout, void *dqkv,
                int B, int T, int NH, int NKV, int HD, void *ws, cudaStream_t s)
{
    int bs;
    plan *p = pick(bwd, B, T, NH, NKV, HD, &bs);
    if (!p)
        return -1;
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD * 2, C = (size_t)NH * HD * 2; /* row bytes */
    const size_t kof = (size_t)NH * HD * 2, vof = (size_t)(NH + NKV) * HD * 2;
    for (int b0 = 0; b0 < B; b0 += bs) {
        const size_t rows = (size_t)b0 * T;
        char *q = (char *)const_cast<void *>(qkv) + rows * QKV;
        std::unordered_map<int64_t, void *> pack = {
            { UID_Q, q },
            { UID_K, q + kof },
            { UID_V, q + vof },
            { UID_O, (char *)out + rows * C },
            { UID_STATS, lse + (size_t)b0 * NH * T },
        };
        if (bwd) {
            char *d = (char *)dqkv + rows * QKV;
            pack[UID_DO] = (char *)const_cast<void *>(dout) + rows * C;
            pack[UID_DQ] = d;
            pack[UID_DK] = d + kof;
            pack[UID_DV] = d + vof;
        }
        if (run(p, pack, ws, s))
            return -1;
    }
    return 0;
}

} // namespace

extern "C" int sdp_cudnn_attention_ws(size_t *ws, int bwd, int B, int T, int NH, int NKV, int HD)
{
    int bs;
    plan *p = pick(bwd != 0, B, T, NH, NKV, HD, &bs);
    if (!p)
        return -1;
    *ws = (size_t)p->ws;
    return 0;
}

extern "C" int sdp_cudnn_attention_batch(int bwd, int B, int T, int NH, int NKV, int HD)
{
    int bs;
    return pick(bwd != 0, B, T, NH, NKV, HD, &bs) ? bs : -1;
}

extern "C" int sdp_cudnn_attention_fwd(void *out, float *lse, const void *qkv, int B, int T, int NH,
                                       int NKV, int HD, void *ws, cudaStream_t s)
{
    return run_batches(0, qkv, out, lse, nullptr, nullptr, B, T, NH, NKV, HD, ws, s);
}

extern "C" int sdp_cudnn_attention_bwd(void *dqkv, const void *dout, const void *qkv,
                                       const void *out, const float *lse, int B, int T, int NH,
                                       int NKV, int HD, void *ws, cudaStream_t s)
{
    return run_batches(1, qkv, const_cast<void *>(out), const_cast<float *>(lse), dout, dqkv, B, T,
                       NH, NKV, HD, ws, s);
}

extern "C" const char *sdp_cudnn_attention_error(void)
{
    return ts.err;
}
