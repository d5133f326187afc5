// experiment: time every cuDNN SDPA plan for qwen3-4b's attention (bf16, causal, GQA 32/8, hd 128)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <cmath>
#include <memory>
#include <unordered_map>
#include <cudnn_frontend.h>
namespace fe = cudnn_frontend;
enum : int64_t { UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV };
static fe::graph::Tensor_attributes view(const char *name, int64_t uid, int B, int H, int T, int HD,
                                         int64_t ld)
{
    return fe::graph::Tensor_attributes()
        .set_name(name)
        .set_uid(uid)
        .set_dim({ B, H, T, HD })
        .set_stride({ (int64_t)T * ld, HD, ld, 1 });
}
static void fill(void *d, size_t n)
{
    uint16_t *h = (uint16_t *)malloc(n * 2);
    uint64_t x = 88172645463325252ull ^ n;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        float f = (float)((x >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
        uint32_t u;
        memcpy(&u, &f, 4);
        h[i] = u >> 16;
    }
    cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice);
    free(h);
}
int main(int argc, char **argv)
{
    int B = argc > 1 ? atoi(argv[1]) : 16, bwd = argc > 2 ? atoi(argv[2]) : 1,
        det = argc > 3 ? atoi(argv[3]) : 0;
    const int T = 1024, NH = 32, NKV = 8, HD = 128;
    const int64_t QKV = (NH + 2 * NKV) * HD, C = NH * HD;
    cudnnHandle_t h;
    cudnnCreate(&h);
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    auto Q = g->tensor(view("Q", UID_Q, B, NH, T, HD, QKV));
    auto K = g->tensor(view("K", UID_K, B, NKV, T, HD, QKV));
    auto V = g->tensor(view("V", UID_V, B, NKV, T, HD, QKV));
    const std::vector<int64_t> sdim = { B, NH, T, 1 }, sstr = { (int64_t)NH * T, T, 1, 1 };
    float scale = 1.0f / sqrtf((float)HD);
    if (!bwd) {
        auto opt = fe::graph::SDPA_attributes()
                       .set_name("f")
                       .set_generate_stats(true)
                       .set_causal_mask(true)
                       .set_attn_scale(scale);
        auto [O, st] = g->sdpa(Q, K, V, opt);
        O->set_output(true)
            .set_uid(UID_O)
            .set_dim({ B, NH, T, HD })
            .set_stride({ (int64_t)T * C, HD, C, 1 });
        st->set_output(true)
            .set_uid(UID_STATS)
            .set_data_type(fe::DataType_t::FLOAT)
            .set_dim(sdim)
            .set_stride(sstr);
    } else {
        auto O = g->tensor(view("O", UID_O, B, NH, T, HD, C));
        auto dO = g->tensor(view("dO", UID_DO, B, NH, T, HD, C));
        auto st = g->tensor(fe::graph::Tensor_attributes()
                                .set_name("stats")
                                .set_uid(UID_STATS)
                                .set_dim(sdim)
                                .set_stride(sstr)
                                .set_data_type(fe::DataType_t::FLOAT));
        auto opt = fe::graph::SDPA_backward_attributes()
                       .set_name("b")
                       .set_causal_mask(true)
                       .set_attn_scale(scale);
        if (det)
            opt.set_deterministic_algorithm(true);
        auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, st, opt);
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
    auto e = g->validate();
    if (!e.is_good()) {
        printf("validate: %s\n", e.get_message().c_str());
        return 1;
    }
    e = g->build_operation_graph(h);
    if (!e.is_good()) {
        printf("opgraph: %s\n", e.get_message().c_str());
        return 1;
    }
    e = g->create_execution_plans(
        { fe::HeurMode_t::A, fe::HeurMode_t::B, fe::HeurMode_t::FALLBACK });
    if (!e.is_good()) {
        printf("plans: %s\n", e.get_message().c_str());
        return 1;
    }
    e = g->check_support(h);
    if (!e.is_good())
        printf("check_support: %s\n", e.get_message().c_str());
    e = g->build_plans(h, fe::BuildPlanPolicy_t::ALL);
    if (!e.is_good())
        printf("build_plans: %s\n", e.get_message().c_str());
    int64_t n = g->get_execution_plan_count();
    printf("B=%d %s det=%d: %lld plans\n", B, bwd ? "bwd" : "fwd", det, (long long)n);
    size_t N = (size_t)B * T;
    void *qkv, *out, *dout, *dqkv;
    float *lse;
    cudaMalloc(&qkv, N * QKV * 2);
    cudaMalloc(&out, N * C * 2);
    cudaMalloc(&dout, N * C * 2);
    cudaMalloc(&dqkv, N * QKV * 2);
    cudaMalloc(&lse, (size_t)B * NH * T * 4);
    fill(qkv, N * QKV);
    fill(dout, N * C);
    fill(out, N * C);
    cudaMemset(lse, 0, (size_t)B * NH * T * 4);
    char *q = (char *)qkv, *d = (char *)dqkv;
    std::unordered_map<int64_t, void *> pack = { { UID_Q, q },
                                                 { UID_K, q + NH * HD * 2 },
                                                 { UID_V, q + (NH + NKV) * HD * 2 },
                                                 { UID_O, out },
                                                 { UID_STATS, lse } };
    if (bwd) {
        pack[UID_DO] = dout;
        pack[UID_DQ] = d;
        pack[UID_DK] = d + NH * HD * 2;
        pack[UID_DV] = d + (NH + NKV) * HD * 2;
    }
    double fl = 4.0 * B * NH * (double)T * T * HD / 2.0 * (bwd ? 2.5 : 1.0);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int64_t i = 0; i < n; i++) {
        int64_t wsz = 0;
        std::string name;
        if (!g->get_workspace_size_plan_at_index(i, wsz).is_good()) {
            printf("  plan %lld: no ws\n", (long long)i);
            continue;
        }
        g->get_plan_name_at_index(i, name);
        void *ws = nullptr;
        if (wsz)
            cudaMalloc(&ws, wsz);
        auto r = g->execute_plan_at_index(h, pack, ws, i);
        if (!r.is_good()) {
            printf("  plan %lld %s: %s\n", (long long)i, name.c_str(), r.get_message().c_str());
            cudaFree(ws);
            continue;
        }
        cudaDeviceSynchronize();
        cudaEventRecord(e0, 0);
        for (int k = 0; k < 10; k++)
            g->execute_plan_at_index(h, pack, ws, i);
        cudaEventRecord(e1, 0);
        cudaEventSynchronize(e1);
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        ms /= 10;
        printf("  plan %lld %-40s ws %8.1f MiB  %.3f ms  %.1f TFLOP/s  %.3f ms/16 seqs\n",
               (long long)i, name.c_str(), wsz / 1048576.0, ms, fl / ms * 1e-9, ms * 16 / B);
        cudaFree(ws);
    }
    fflush(stdout);
    return 0;
}
