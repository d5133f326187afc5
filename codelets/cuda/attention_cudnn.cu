// SPDX-License-Identifier: MIT
/* Causal grouped-query attention through cuDNN's fused flash-attention graphs (cudnn_frontend,
 * header-only, over cuDNN's backend API): the same contract as sdp_cuda_attention_fwd/bwd (fused
 * qkv (B*T, (NH + 2 NKV) HD), out (B*T, NH*HD), lse (B, NH, T) natural log-sum-exp of the scaled
 * scores), in bf16 only.  Q, K, V, O, dQ, dK, dV are strided views of the packed rows, so nothing
 * is copied; a batch whose backward workspace would pass its cap (cap_bytes) runs in sub-batches.
 * The graphs are built once per shape and thread (a StarPU CUDA worker keeps its device), with
 * one cuDNN handle per thread.  Document masking: each document a sequence (run_docs), from the
 * starts on the host.
 * Tests: tests/kernels/test_cuda_attention.c, test_cuda_attention_long.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
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
enum : int64_t { UID_SEQ_Q = 10, UID_SEQ_KV, UID_RAG_QKV, UID_RAG_O, UID_RAG_STATS }; /* docs */

/* A shape: B sequences of T tokens, or with document masking (D > 0) B rows of T tokens as B*D
 * documents of at most S tokens each (D, S: powers of two, or S = T). */
struct shape {
    int bwd, B, T, NH, NKV, HD, D, S;
    bool operator==(const shape &o) const
    {
        return bwd == o.bwd && B == o.B && T == o.T && NH == o.NH && NKV == o.NKV && HD == o.HD &&
               D == o.D && S == o.S;
    }
};

struct plan {
    shape sh;
    std::shared_ptr<fe::graph::Graph> g; /* null: cuDNN has no engine for this shape */
    int64_t ws;
};

/* the sub-batch chosen for a whole batch under a cap (see pick), null plan when cuDNN cannot run
 * it */
struct choice {
    shape sh;
    size_t cap;
    int bs;
    plan *p;
};

/* document masking: the slots of a call staged in pinned memory, a ring of these per thread; one
 * is rewritten once its last copy has run (ev), so a call waits only when the GPU is NSTAGE masked
 * calls behind it */
enum { NSTAGE = 4 };
struct stage {
    int32_t *p = nullptr;
    size_t n = 0;
    cudaEvent_t ev = nullptr;
    bool set = false;
};

struct thread_state {
    cudnnHandle_t handle = nullptr;
    int device = -1;
    std::deque<plan> plans; /* a deque: the pointers in choices stay valid as plans are added */
    std::vector<choice> choices;
    char err[512] = "";
    stage stages[NSTAGE];
    int next_stage = 0;
    ~thread_state()
    {
        choices.clear();
        plans.clear();
        if (handle)
            cudnnDestroy(handle);
        for (stage &g : stages) { /* at exit the context may be gone: errors are ignored */
            if (g.p)
                cudaFreeHost(g.p);
            if (g.ev)
                cudaEventDestroy(g.ev);
        }
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
    if (ts.handle && ts.device != dev) { /* plans and the event are per device */
        ts.choices.clear();
        ts.plans.clear();
        cudnnDestroy(ts.handle);
        ts.handle = nullptr;
        for (stage &g : ts.stages) { /* the pinned slots stay: wait for their last copy */
            if (g.set)
                cudaEventSynchronize(g.ev);
            if (g.ev)
                cudaEventDestroy(g.ev);
            g.ev = nullptr;
            g.set = false;
        }
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

/* (b, h, t, d) view of a head block of packed rows of width ld; with document masking the
 * sequences start where the ragged offsets (elements) say, not every T rows */
fe::graph::Tensor_attributes view(const char *name, int64_t uid, int B, int H, int T, int HD,
                                  int64_t ld, std::shared_ptr<fe::graph::Tensor_attributes> rag)
{
    auto t = fe::graph::Tensor_attributes()
                 .set_name(name)
                 .set_uid(uid)
                 .set_dim({ B, H, T, HD })
                 .set_stride({ (int64_t)T * ld, HD, ld, 1 });
    if (rag)
        t.set_ragged_offset(rag);
    return t;
}

/* an int32 vector (n, 1, 1, 1) on the device: sequence lengths or ragged offsets */
std::shared_ptr<fe::graph::Tensor_attributes> index_tensor(fe::graph::Graph &g, const char *name,
                                                           int64_t uid, int64_t n)
{
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_uid(uid)
                        .set_dim({ n, 1, 1, 1 })
                        .set_stride({ 1, 1, 1, 1 })
                        .set_data_type(fe::DataType_t::INT32));
}

/* Document masking's index tensors (null without): the B*D sequences' lengths, by which the
 * padding and causal masks apply per document, and their first rows' element offsets in qkv (and
 * dqkv), out (and dout) and the stats, which cuDNN keeps token-major (token, head) when ragged. */
struct docs_tensors {
    std::shared_ptr<fe::graph::Tensor_attributes> seq_q, seq_kv, qkv, o, st;
};

docs_tensors docs_inputs(fe::graph::Graph &g, const shape &sh)
{
    docs_tensors d;
    if (!sh.D)
        return d;
    const int64_t n = (int64_t)sh.B * sh.D;
    d.seq_q = index_tensor(g, "seq_q", UID_SEQ_Q, n);
    d.seq_kv = index_tensor(g, "seq_kv", UID_SEQ_KV, n);
    d.qkv = index_tensor(g, "ragged_qkv", UID_RAG_QKV, n + 1);
    d.o = index_tensor(g, "ragged_o", UID_RAG_O, n + 1);
    d.st = index_tensor(g, "ragged_stats", UID_RAG_STATS, n + 1);
    return d;
}

/* the stats (b, h, t, 1): (B, NH, T) per sequence, or token-major ragged with document masking */
void stats_layout(fe::graph::Tensor_attributes &t, const shape &sh, int N, int S,
                  const docs_tensors &d)
{
    t.set_uid(UID_STATS).set_data_type(fe::DataType_t::FLOAT).set_dim({ N, sh.NH, S, 1 });
    if (d.st)
        t.set_stride({ (int64_t)S * sh.NH, 1, sh.NH, 1 }).set_ragged_offset(d.st);
    else
        t.set_stride({ (int64_t)sh.NH * S, S, 1, 1 });
}

std::shared_ptr<fe::graph::Graph> build(const shape &sh)
{
    const int B = sh.B, NH = sh.NH, NKV = sh.NKV, HD = sh.HD;
    const int N = sh.D ? B * sh.D : B, S = sh.D ? sh.S : sh.T; /* sequences, their length */
    const int64_t QKV = (int64_t)(NH + 2 * NKV) * HD, C = (int64_t)NH * HD;
    /* the tokens of a call, which bound the forward's ragged rows */
    const int64_t tokens = (int64_t)B * sh.T;
    const float scale = (float)(1.0 / sqrt((double)HD));
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    const docs_tensors d = docs_inputs(*g, sh);
    auto Q = g->tensor(view("Q", UID_Q, N, NH, S, HD, QKV, d.qkv));
    auto K = g->tensor(view("K", UID_K, N, NKV, S, HD, QKV, d.qkv));
    auto V = g->tensor(view("V", UID_V, N, NKV, S, HD, QKV, d.qkv));
    if (!sh.bwd) {
        auto opt = fe::graph::SDPA_attributes()
                       .set_name("sdpa_fwd")
                       .set_generate_stats(true)
                       .set_causal_mask(true)
                       .set_attn_scale(scale);
        if (sh.D)
            opt.set_padding_mask(true)
                .set_seq_len_q(d.seq_q)
                .set_seq_len_kv(d.seq_kv)
                .set_max_total_seq_len_q(tokens)
                .set_max_total_seq_len_kv(tokens);
        auto [O, stats] = g->sdpa(Q, K, V, opt);
        O->set_output(true)
            .set_uid(UID_O)
            .set_dim({ N, NH, S, HD })
            .set_stride({ (int64_t)S * C, HD, C, 1 });
        if (d.o)
            O->set_ragged_offset(d.o);
        stats->set_output(true);
        stats_layout(*stats, sh, N, S, d);
    } else {
        auto O = g->tensor(view("O", UID_O, N, NH, S, HD, C, d.o));
        auto dO = g->tensor(view("dO", UID_DO, N, NH, S, HD, C, d.o));
        fe::graph::Tensor_attributes st;
        st.set_name("stats");
        stats_layout(st, sh, N, S, d);
        auto stats = g->tensor(st);
        auto opt = fe::graph::SDPA_backward_attributes()
                       .set_name("sdpa_bwd")
                       .set_causal_mask(true)
                       .set_attn_scale(scale);
        /* no max_total_seq_len here: with it, cuDNN 9.14 laid its fp32 intermediates out on the
         * ragged tensors and returned zero dK, dV for the last keys of a document at qwen3-4b's
         * heads and 32768 tokens, and asked 6.9 GB; without it they are dense, (N, NH, S, HD),
         * and right (tests/kernels/test_cuda_attention_long.c) */
        if (sh.D)
            opt.set_padding_mask(true).set_seq_len_q(d.seq_q).set_seq_len_kv(d.seq_kv);
        auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, stats, opt);
        const int64_t uids[3] = { UID_DQ, UID_DK, UID_DV }, heads[3] = { NH, NKV, NKV };
        int i = 0;
        for (auto &t : { dQ, dK, dV }) {
            t->set_output(true)
                .set_uid(uids[i])
                .set_dim({ N, heads[i], S, HD })
                .set_stride({ (int64_t)S * QKV, HD, QKV, 1 });
            if (d.qkv)
                t->set_ragged_offset(d.qkv);
            i++;
        }
    }
    fe::error_t e = g->build(ts.handle, { fe::HeurMode_t::A });
    if (!e.is_good()) {
        set_err(sh.bwd ? "cuDNN SDPA backward graph" : "cuDNN SDPA forward graph", e.get_message());
        return nullptr;
    }
    return g;
}

plan *find(const shape &sh)
{
    if (sh.B <= 0 || sh.T <= 0 || sh.NH <= 0 || sh.NKV <= 0 || sh.NH % sh.NKV || sh.HD <= 0) {
        set_err("shape", "B, T, NH, NKV, HD must be positive and NH a multiple of NKV");
        return nullptr;
    }
    /* the ragged offsets are int32 elements of qkv, the widest rows */
    if (sh.D && (int64_t)sh.B * sh.T * (sh.NH + 2 * sh.NKV) * sh.HD > INT32_MAX) {
        set_err("document masking", "a call's qkv passes 2^31 elements (int32 ragged offsets)");
        return nullptr;
    }
    if (!ensure_handle())
        return nullptr;
    for (plan &p : ts.plans)
        if (p.sh == sh)
            return p.g ? &p : nullptr;
    plan p = { sh, build(sh), 0 };
    if (p.g && !p.g->get_workspace_size(p.ws).is_good()) {
        set_err("cuDNN SDPA", "no workspace size");
        p.g = nullptr;
    }
    ts.plans.push_back(p); /* a failure is remembered: no rebuild per call */
    return ts.plans.back().g ? &ts.plans.back() : nullptr;
}

/* The cap of a call without a budget (budget 0): 1 GiB, or 128 MiB under a GPU memory limit below
 * 20 GiB (sdp_cuda_small_gpu_limit), where the workspace is taken from the data StarPU may keep.
 * The workspace grows by about 32 MiB a sequence at qwen3-4b's heads and 1024 tokens; larger
 * calls are faster per layer (bench/results/2026-12-02-h200-kernels.md). */
#define ATTN_WS_MIB         1024.0
#define ATTN_LIMITED_WS_MIB 128.0

/* The cap on a call's workspace: SDP_ATTENTION_WS_MIB when set, else the budget the task was
 * given (the plan's, graph/cost.c), else the default above. */
double cap_bytes(size_t budget)
{
    static const double env_mib = sdp_env_double("SDP_ATTENTION_WS_MIB", 0);
    if (env_mib > 0)
        return env_mib * 1048576.0;
    if (budget > 0)
        return (double)budget;
    return (sdp_cuda_small_gpu_limit() ? ATTN_LIMITED_WS_MIB : ATTN_WS_MIB) * 1048576.0;
}

/* The sequences (rows, with document masking) per cuDNN call: the largest divisor of B whose
 * workspace fits the cap (cap_bytes; the backward's grows with B), else 1.  Sequences (rows) are
 * independent, so a call per sub-batch computes the same values; the sub-batches run one after
 * the other on the stream and share the workspace.  The choice is made once per shape, cap and
 * thread. */
plan *pick(const shape &whole, size_t budget, int *bs_out)
{
    const double cap = cap_bytes(budget);
    if (whole.B <= 0) { /* no sub-batch to ask find() about */
        set_err("shape", "B, T, NH, NKV, HD must be positive and NH a multiple of NKV");
        return nullptr;
    }
    if (!ensure_handle()) /* also drops the choices of another device */
        return nullptr;
    for (const choice &c : ts.choices)
        if (c.sh == whole && c.cap == budget) {
            *bs_out = c.bs;
            return c.p;
        }
    choice c = { whole, budget, 0, nullptr };
    for (int bs = whole.B; bs >= 1; bs--) {
        if (whole.B % bs)
            continue;
        shape sub = whole;
        sub.B = bs;
        plan *p = find(sub);
        if (!p) { /* no engine for this sub-batch: the batch falls back */
            c.p = nullptr;
            break;
        }
        c.p = p;
        c.bs = bs;
        if ((double)p->ws <= cap)
            break;
    }
    ts.choices.push_back(c);
    *bs_out = c.bs;
    return c.p;
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

/* the views of the rows from b0 on (lse: its sequences) */
std::unordered_map<int64_t, void *> sub_pack(int bwd, const void *qkv, void *out, float *lse,
                                             const void *dout, void *dqkv, int b0, int T, int NH,
                                             int NKV, int HD)
{
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD * 2, C = (size_t)NH * HD * 2; /* row bytes */
    const size_t kof = (size_t)NH * HD * 2, vof = (size_t)(NH + NKV) * HD * 2;
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
    return pack;
}

/* Runs the forward (writes out, lse) or the backward (reads out, lse, dout; writes dqkv) of B
 * sequences in calls of the chosen sub-batch, each call on views offset to its first sequence. */
int run_batches(int bwd, const void *qkv, void *out, float *lse, const void *dout, void *dqkv,
                int B, int T, int NH, int NKV, int HD, size_t budget, void *ws, cudaStream_t s)
{
    int bs;
    plan *p = pick({ bwd, B, T, NH, NKV, HD, 0, 0 }, budget, &bs);
    if (!p)
        return -1;
    for (int b0 = 0; b0 < B; b0 += bs) {
        auto pack = sub_pack(bwd, qkv, out, lse, dout, dqkv, b0, T, NH, NKV, HD);
        if (run(p, pack, ws, s))
            return -1;
    }
    return 0;
}

/* lse (bs, NH, T) of the project's kernels <-> cuDNN's ragged stats, token-major (bs*T, NH) */
__global__ void relayout(float *lse, float *st, int to_lse, int T, int NH, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t tok = i / NH, l = (tok / T * NH + i % NH) * T + tok % T;
        if (to_lse)
            lse[l] = st[i];
        else
            st[i] = lse[l];
    }
}

int relayout_stats(int to_lse, float *lse, float *st, int bs, int T, int NH, cudaStream_t s)
{
    const size_t n = (size_t)bs * T * NH;
    relayout<<<(unsigned)std::min<size_t>((n + 255) / 256, 4096), 256, 0, s>>>(lse, st, to_lse, T,
                                                                               NH, n);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        set_err("stats relayout", cudaGetErrorString(e));
    return e == cudaSuccess ? 0 : -1;
}

size_t up256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

/* Document masking: the rows' documents as the sequences of a variable-length call, each its own
 * causal attention (cuDNN's ragged layout with a padding mask).  The starts come on the host (the
 * task's copy of the data's); D, the document slots a row, is the most documents of a row rounded
 * up to a power of two, and S, the longest document so rounded (at most T), so that few graphs
 * serve every micro-batch; the empty slots have length 0.  The sub-batches are picked as without
 * masking.  The workspace holds cuDNN's, then the stats of a sub-batch (cuDNN's ragged stats are
 * token-major: they are moved to and from lse (B, NH, T), the layout of the project's kernels, so
 * either direction may fall back alone), then each sub-batch's lengths and ragged offsets, copied
 * from pinned memory (a stage of the ring). */
int run_docs(int bwd, const void *qkv, void *out, float *lse, const void *dout, void *dqkv,
             const int32_t *starts, int B, int T, int NH, int NKV, int HD, size_t budget,
             void *(*ws_fn)(size_t), cudaStream_t s, struct sdp_cudnn_docs_call *call)
{
    if (B <= 0 || T <= 0) {
        set_err("shape", "B and T must be positive");
        return -1;
    }
    if (!ensure_handle())
        return -1;
    int longest;
    const int most = sdp_cuda_attention_docs_max(starts, B, T, &longest);
    if (most <= 0) {
        set_err("document masking", "a start is neither the previous token's nor the token");
        return -1;
    }
    shape whole = { bwd, B, T, NH, NKV, HD, 1, 1 };
    while (whole.D < most)
        whole.D *= 2;
    while (whole.S < longest)
        whole.S *= 2;
    whole.S = std::min(T, whole.S);
    int bs;
    plan *p = pick(whole, budget, &bs);
    if (!p)
        return -1;
    const int n = bs * whole.D, nsub = B / bs;
    const size_t a = (size_t)(n + 1 + 63) / 64 * 64, per = 4 * a; /* 256-byte aligned arrays */
    const size_t st_off = up256((size_t)p->ws);
    const size_t idx_off = st_off + up256((size_t)bs * T * NH * sizeof(float));
    const size_t total = idx_off + per * nsub * sizeof(int32_t);
    stage &sg = ts.stages[ts.next_stage];
    ts.next_stage = (ts.next_stage + 1) % NSTAGE;
    if (!sg.ev && cudaEventCreateWithFlags(&sg.ev, cudaEventDisableTiming) != cudaSuccess)
        return sg.ev = nullptr, set_err("document masking", "no event for the slots' copy"), -1;
    if (sg.set && cudaEventSynchronize(sg.ev) != cudaSuccess) /* its last copy has run */
        return set_err("document masking", "an earlier copy of the slots failed"), -1;
    sg.set = false;
    if (sg.n < per * nsub) {
        if (sg.p)
            cudaFreeHost(sg.p);
        sg.n = 0;
        if (cudaMallocHost((void **)&sg.p, per * nsub * sizeof(int32_t)) != cudaSuccess) {
            sg.p = nullptr;
            set_err("document masking", "no pinned host memory for the slots");
            return -1;
        }
        sg.n = per * nsub;
    }
    std::vector<int32_t> tok((size_t)n + 1);
    const int64_t widths[3] = { (int64_t)(NH + 2 * NKV) * HD, (int64_t)NH * HD, NH };
    for (int k = 0; k < nsub; k++) {
        int32_t *len = sg.p + k * per;
        if (sdp_cuda_attention_docs(len, tok.data(), starts, k * bs, bs, T, whole.D))
            return set_err("document masking", "a row has more documents than its slots"), -1;
        for (int j = 0; j < 3; j++) /* element offsets in qkv, out and the stats (find: < 2^31) */
            for (int i = 0; i <= n; i++)
                len[(j + 1) * a + i] = (int32_t)(tok[i] * widths[j]);
    }
    char *ws = (char *)ws_fn(total);
    if (!ws)
        return set_err("document masking", "no workspace"), -1;
    int32_t *idx = (int32_t *)(ws + idx_off);
    float *st = (float *)(ws + st_off);
    if (cudaMemcpyAsync(idx, sg.p, per * nsub * sizeof(int32_t), cudaMemcpyHostToDevice, s) !=
            cudaSuccess ||
        cudaEventRecord(sg.ev, s) != cudaSuccess)
        return set_err("document masking", "cannot copy the slots"), -1;
    sg.set = true;
    for (int k = 0; k < nsub; k++) {
        const int b0 = k * bs;
        int32_t *len = idx + k * per;
        auto pack = sub_pack(bwd, qkv, out, lse, dout, dqkv, b0, T, NH, NKV, HD);
        pack[UID_STATS] = st;
        pack[UID_SEQ_Q] = len;
        pack[UID_SEQ_KV] = len;
        pack[UID_RAG_QKV] = len + a;
        pack[UID_RAG_O] = len + 2 * a;
        pack[UID_RAG_STATS] = len + 3 * a;
        float *lse_k = lse + (size_t)b0 * NH * T;
        if (bwd && relayout_stats(0, lse_k, st, bs, T, NH, s))
            return -1;
        if (run(p, pack, ws, s))
            return -1;
        if (!bwd && relayout_stats(1, lse_k, st, bs, T, NH, s))
            return -1;
    }
    if (call)
        *call = { bs, whole.D, longest, total };
    return 0;
}

} // namespace

extern "C" int sdp_cudnn_attention_ws(size_t *ws, int bwd, int B, int T, int NH, int NKV, int HD,
                                      size_t budget)
{
    int bs;
    plan *p = pick({ bwd != 0, B, T, NH, NKV, HD, 0, 0 }, budget, &bs);
    if (!p)
        return -1;
    *ws = (size_t)p->ws;
    return 0;
}

extern "C" int sdp_cudnn_attention_batch(int bwd, int B, int T, int NH, int NKV, int HD,
                                         size_t budget)
{
    int bs;
    return pick({ bwd != 0, B, T, NH, NKV, HD, 0, 0 }, budget, &bs) ? bs : -1;
}

extern "C" int sdp_cudnn_attention_fwd(void *out, float *lse, const void *qkv, int B, int T, int NH,
                                       int NKV, int HD, size_t budget, void *ws, cudaStream_t s)
{
    return run_batches(0, qkv, out, lse, nullptr, nullptr, B, T, NH, NKV, HD, budget, ws, s);
}

extern "C" int sdp_cudnn_attention_bwd(void *dqkv, const void *dout, const void *qkv,
                                       const void *out, const float *lse, int B, int T, int NH,
                                       int NKV, int HD, size_t budget, void *ws, cudaStream_t s)
{
    return run_batches(1, qkv, const_cast<void *>(out), const_cast<float *>(lse), dout, dqkv, B, T,
                       NH, NKV, HD, budget, ws, s);
}

extern "C" int sdp_cudnn_attention_docs_fwd(void *out, float *lse, const void *qkv,
                                            const int32_t *starts, int B, int T, int NH, int NKV,
                                            int HD, size_t budget, void *(*ws_fn)(size_t),
                                            cudaStream_t s, struct sdp_cudnn_docs_call *call)
{
    return run_docs(0, qkv, out, lse, nullptr, nullptr, starts, B, T, NH, NKV, HD, budget, ws_fn, s,
                    call);
}

extern "C" int sdp_cudnn_attention_docs_bwd(void *dqkv, const void *dout, const void *qkv,
                                            const void *out, const float *lse,
                                            const int32_t *starts, int B, int T, int NH, int NKV,
                                            int HD, size_t budget, void *(*ws_fn)(size_t),
                                            cudaStream_t s, struct sdp_cudnn_docs_call *call)
{
    return run_docs(1, qkv, const_cast<void *>(out), const_cast<float *>(lse), dout, dqkv, starts,
                    B, T, NH, NKV, HD, budget, ws_fn, s, call);
}

extern "C" const char *sdp_cudnn_attention_error(void)
{
    return ts.err;
}
