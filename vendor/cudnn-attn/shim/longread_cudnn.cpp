// longread's entry into cuDNN's fused attention (scaled dot-product attention, "SDPA"), through
// cuDNN's header-only C++ frontend with its dynamic loading: libcudnn is opened at run time
// (longread_cudnn_open), never linked, so a binary built with it runs where cuDNN is absent
// (the attention then stays on FlashAttention-2). The frontend's and cuDNN's headers come from
// PyPI at build time (scripts/build_cuda.sh); nothing of NVIDIA's is in this repository.
//
// The layouts are those of vendor/flash-attn's entry points, so that one Rust op drives either:
// q, k and v are the three column blocks of the fused q/k/v product, `rows = batch · seq` rows
// of `row_stride` elements (bf16), heads of `dim` side by side in each block; the output is
// `[rows, heads · dim]`; the backward pass writes dq, dk and dv in rows of `grad_row_stride`
// elements (three column blocks of one gradient, or three blocks of their own; 0: head-major,
// `[batch, heads, seq, dim]`). Each sequence's queries attend over its first `seq_kv[i]` keys
// (`seq_q` and `seq_kv`: int32 `[batch]` on the device; both null: every key is real).
// Softmax statistics (`stats`, f32 `[batch, heads, seq]`) link the passes; dropout draws from
// cuDNN's Philox generator with `seed_offset` (int64 `[2]` on the device: seed, offset), so a
// backward pass given the same pair applies the forward pass's mask.
//
// Graphs are built once per shape (cuDNN's heuristics pick the engine; its runtime-compiled
// kernels are compiled then) and kept; one lock serialises building and enqueuing.

#include <dlfcn.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <cudnn_frontend.h>

namespace cudnn_frontend {
// The frontend's handle to libcudnn under NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING.
void *cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend

namespace fe = cudnn_frontend;

namespace {

std::mutex lock;
thread_local std::string last_error;

enum Uid : int64_t { Q = 1, K, V, O, STATS, SEQ_Q, SEQ_KV, SEED, OFFSET, DO, DQ, DK, DV };

// Everything a graph is built from.
struct Key {
    int ordinal;
    bool backward;
    int64_t batch, heads, dim, seq, row_stride, grad_row_stride;
    bool padded, stats, deterministic;
    float scale, p_drop;

    auto tie() const {
        return std::tie(ordinal, backward, batch, heads, dim, seq, row_stride, grad_row_stride, padded, stats,
                        deterministic, scale, p_drop);
    }
    bool operator<(const Key &other) const { return tie() < other.tie(); }
};

std::map<Key, std::shared_ptr<fe::graph::Graph>> graphs;
std::map<int, cudnnHandle_t> handles;
// Graphs built so far and the milliseconds their building took (longread_cudnn_plans).
int64_t plans_built = 0;
double plans_milliseconds = 0.0;

struct Failure : std::exception {
    std::string message;
    explicit Failure(std::string m) : message(std::move(m)) {}
    const char *what() const noexcept override { return message.c_str(); }
};

void check(fe::error_t status, const char *step) {
    if (!status.is_good()) {
        throw Failure(std::string("cuDNN attention: ") + step + ": " + status.get_message());
    }
}

cudnnHandle_t handle_for(int ordinal, void *stream) {
    auto found = handles.find(ordinal);
    cudnnHandle_t handle;
    if (found == handles.end()) {
        if (fe::detail::create_handle(&handle) != CUDNN_STATUS_SUCCESS) {
            throw Failure("cuDNN attention: cudnnCreate failed on GPU " + std::to_string(ordinal));
        }
        handles.emplace(ordinal, handle);
    } else {
        handle = found->second;
    }
    if (fe::detail::set_stream(handle, static_cast<cudaStream_t>(stream)) != CUDNN_STATUS_SUCCESS) {
        throw Failure("cuDNN attention: cudnnSetStream failed");
    }
    return handle;
}

std::shared_ptr<fe::graph::Graph> build(const Key &key, cudnnHandle_t handle) {
    auto graph = std::make_shared<fe::graph::Graph>();
    graph->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    const int64_t b = key.batch, h = key.heads, d = key.dim, s = key.seq, hidden = key.heads * key.dim;
    // [batch, heads, seq, dim] views of row-major rows: heads side by side within a row.
    const std::vector<int64_t> dims = {b, h, s, d};
    const auto rows_of = [&](int64_t row_stride) { return std::vector<int64_t>{s * row_stride, d, row_stride, 1}; };
    const auto tensor = [&](int64_t uid, const char *name, std::vector<int64_t> dim, std::vector<int64_t> stride) {
        return graph->tensor(fe::graph::Tensor_attributes().set_uid(uid).set_name(name).set_dim(dim).set_stride(stride));
    };
    const auto scalars = [&](int64_t uid, const char *name, int64_t n, fe::DataType_t type) {
        return graph->tensor(fe::graph::Tensor_attributes()
                                 .set_uid(uid)
                                 .set_name(name)
                                 .set_dim({n, 1, 1, 1})
                                 .set_stride({1, 1, 1, 1})
                                 .set_data_type(type));
    };
    auto q = tensor(Q, "q", dims, rows_of(key.row_stride));
    auto k = tensor(K, "k", dims, rows_of(key.row_stride));
    auto v = tensor(V, "v", dims, rows_of(key.row_stride));
    std::shared_ptr<fe::graph::Tensor_attributes> seq_q, seq_kv, seed, offset;
    if (key.padded) {
        seq_q = scalars(SEQ_Q, "seq_q", b, fe::DataType_t::INT32);
        seq_kv = scalars(SEQ_KV, "seq_kv", b, fe::DataType_t::INT32);
    }
    if (key.p_drop > 0.0f) {
        seed = scalars(SEED, "seed", 1, fe::DataType_t::INT64);
        offset = scalars(OFFSET, "offset", 1, fe::DataType_t::INT64);
    }
    const std::vector<int64_t> stats_dims = {b, h, s, 1}, stats_strides = {h * s, s, 1, 1};
    if (key.backward) {
        auto options = fe::graph::SDPA_backward_attributes().set_name("longread_attention_backward").set_attn_scale(key.scale);
        if (key.padded) options.set_padding_mask(true).set_seq_len_q(seq_q).set_seq_len_kv(seq_kv);
        if (key.p_drop > 0.0f) options.set_dropout(key.p_drop, seed, offset);
        // Hopper's deterministic engine writes dP (batch · heads · seq² bf16) to the workspace
        // and reduces dq by a product instead of atomics.
        if (key.deterministic) options.set_deterministic_algorithm(true);
        auto o = tensor(O, "o", dims, rows_of(hidden));
        auto d_o = tensor(DO, "do", dims, rows_of(hidden));
        auto stats = tensor(STATS, "stats", stats_dims, stats_strides);
        stats->set_data_type(fe::DataType_t::FLOAT);
        auto [dq, dk, dv] = graph->sdpa_backward(q, k, v, o, d_o, stats, options);
        // Rows of grad_row_stride, or with 0 head-major: each head's [seq, dim] rows contiguous.
        const std::vector<int64_t> head_major = {h * s * d, s * d, d, 1};
        const auto grads = key.grad_row_stride > 0 ? rows_of(key.grad_row_stride) : head_major;
        dq->set_output(true).set_uid(DQ).set_dim(dims).set_stride(grads);
        dk->set_output(true).set_uid(DK).set_dim(dims).set_stride(grads);
        dv->set_output(true).set_uid(DV).set_dim(dims).set_stride(grads);
    } else {
        auto options = fe::graph::SDPA_attributes()
                           .set_name("longread_attention")
                           .set_generate_stats(key.stats)
                           .set_attn_scale(key.scale);
        if (key.padded) options.set_padding_mask(true).set_seq_len_q(seq_q).set_seq_len_kv(seq_kv);
        if (key.p_drop > 0.0f) options.set_dropout(key.p_drop, seed, offset);
        auto [o, stats] = graph->sdpa(q, k, v, options);
        o->set_output(true).set_uid(O).set_dim(dims).set_stride(rows_of(hidden));
        if (key.stats) {
            stats->set_output(true)
                .set_uid(STATS)
                .set_data_type(fe::DataType_t::FLOAT)
                .set_dim(stats_dims)
                .set_stride(stats_strides);
        }
    }
    check(graph->validate(), "validate");
    check(graph->build_operation_graph(handle), "build_operation_graph");
    check(graph->create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans");
    check(graph->check_support(handle), "check_support");
    check(graph->build_plans(handle), "build_plans");
    return graph;
}

// Finds or builds the graph of `key`; with `*workspace_size < 0` stores the workspace it needs
// and returns; else runs it with `pointers` and `workspace`.
int run(const Key &key, std::unordered_map<int64_t, void *> &pointers, void *workspace, int64_t *workspace_size,
        void *stream) {
    try {
        std::lock_guard<std::mutex> guard(lock);
        if (!fe::cudnn_dlhandle) throw Failure("cuDNN attention: cuDNN is not open (longread_cudnn_open)");
        cudnnHandle_t handle = handle_for(key.ordinal, stream);
        auto found = graphs.find(key);
        if (found == graphs.end()) {
            const auto started = std::chrono::steady_clock::now();
            auto graph = build(key, handle);
            plans_milliseconds +=
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
            ++plans_built;
            found = graphs.emplace(key, std::move(graph)).first;
        }
        const auto &graph = found->second;
        const int64_t needed = graph->get_workspace_size();
        if (*workspace_size < 0) {
            *workspace_size = needed;
            return 0;
        }
        if (*workspace_size < needed) {
            throw Failure("cuDNN attention: a workspace of " + std::to_string(*workspace_size) + " bytes, " +
                          std::to_string(needed) + " needed");
        }
        check(graph->execute(handle, pointers, workspace), "execute");
        return 0;
    } catch (const std::exception &e) {
        last_error = e.what();
        return 1;
    }
}

}  // namespace

extern "C" {

// What both passes are given besides their tensors: the GPU, the sizes, the scale and dropout,
// each sequence's query and real-key counts (int32 [batch] on the device, or both null: every
// key is real), the dropout's seed and offset (int64 [2] on the device; read when p_drop > 0)
// and the stream.
struct longread_sdpa_call {
    int ordinal;
    int64_t batch, heads, dim, seq;
    int64_t row_stride;  // elements per row of the q/k/v product
    float scale, p_drop;
    const int32_t *seq_q, *seq_kv;
    const int64_t *seed_offset;
    void *stream;
};
// The layout src/lib.rs's `SdpaCall` declares (and asserts) on 64-bit targets.
static_assert(sizeof(longread_sdpa_call) == 88 && offsetof(longread_sdpa_call, batch) == 8 &&
                  offsetof(longread_sdpa_call, scale) == 48 && offsetof(longread_sdpa_call, seq_q) == 56 &&
                  offsetof(longread_sdpa_call, stream) == 80,
              "longread_sdpa_call must match SdpaCall in src/lib.rs");

// Opens cuDNN (`library`, or libcudnn.so.9 on the loader's path when null): its version (e.g.
// 91900), or 0 with the reason in longread_cudnn_error().
int64_t longread_cudnn_open(const char *library) {
    try {
        std::lock_guard<std::mutex> guard(lock);
        if (!fe::cudnn_dlhandle) {
            const char *name = library ? library : "libcudnn.so.9";
            void *opened = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
            if (!opened) {
                const char *why = dlerror();
                throw Failure(std::string("cannot open ") + name + ": " + (why ? why : "unknown error"));
            }
            fe::cudnn_dlhandle = opened;
            // The frontend opens a CUDA runtime of its own (libcudart.so.12, else .13, warning
            // when both are there): prefer CUDA 13's, the version this binary is built for,
            // unless the user named one.
            if (!std::getenv("CUDNN_FRONTEND_CUDART_LIB_NAME")) {
                if (void *cudart = dlopen("libcudart.so.13", RTLD_NOW)) {
                    dlclose(cudart);
                    setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", "libcudart.so.13", 0);
                }
            }
        }
        return static_cast<int64_t>(fe::detail::get_backend_version());
    } catch (const std::exception &e) {
        last_error = e.what();
        return 0;
    }
}

// The message of this thread's last failed call.
const char *longread_cudnn_error() { return last_error.c_str(); }

// How many graphs (one per shape and pass) have been built in this process, and the
// milliseconds their building took: cuDNN's cost of a new batch shape.
void longread_cudnn_plans(int64_t *count, double *milliseconds) {
    std::lock_guard<std::mutex> guard(lock);
    *count = plans_built;
    *milliseconds = plans_milliseconds;
}

}  // extern "C"

namespace {

// The key and the pointers both passes share.
Key key_of(const longread_sdpa_call &call, bool backward, int64_t grad_row_stride, bool stats, bool deterministic) {
    return Key{call.ordinal, backward, call.batch, call.heads, call.dim, call.seq, call.row_stride, grad_row_stride,
               call.seq_kv != nullptr, stats, deterministic, call.scale, call.p_drop};
}

std::unordered_map<int64_t, void *> pointers_of(const longread_sdpa_call &call, const void *q, const void *k,
                                                const void *v) {
    std::unordered_map<int64_t, void *> pointers = {
        {Q, const_cast<void *>(q)}, {K, const_cast<void *>(k)}, {V, const_cast<void *>(v)}};
    if (call.seq_kv) {
        pointers[SEQ_Q] = const_cast<int32_t *>(call.seq_q);
        pointers[SEQ_KV] = const_cast<int32_t *>(call.seq_kv);
    }
    if (call.p_drop > 0.0f) {
        pointers[SEED] = const_cast<int64_t *>(call.seed_offset);
        pointers[OFFSET] = const_cast<int64_t *>(call.seed_offset + 1);
    }
    return pointers;
}

}  // namespace

extern "C" {

// Attention of bf16 sequences (layouts above), with dropout when p_drop > 0 and softmax
// statistics when `stats` is not null. With `*workspace_size < 0` it only builds (or finds) the
// graph and stores the workspace it needs. Returns 0 or 1 (longread_cudnn_error()).
int longread_cudnn_sdpa_fwd_bf16(const longread_sdpa_call *call, const void *q, const void *k, const void *v,
                                 void *out, float *stats, void *workspace, int64_t *workspace_size) {
    auto pointers = pointers_of(*call, q, k, v);
    pointers[O] = out;
    if (stats) pointers[STATS] = stats;
    return run(key_of(*call, false, 0, stats != nullptr, false), pointers, workspace, workspace_size, call->stream);
}

// The backward pass of longread_cudnn_sdpa_fwd_bf16 given its output, the output's gradient and
// its statistics: dq, dk and dv in rows of `grad_row_stride` elements (heads side by side), or
// with `grad_row_stride` 0 head-major (`[batch, heads, seq, dim]` contiguous),
// by cuDNN's deterministic engine when `deterministic` is not 0 (the same bits every run). With
// `*workspace_size < 0` it only builds (or finds) the graph (the tensors may then be null).
// Returns 0 or 1 (longread_cudnn_error()).
int longread_cudnn_sdpa_bwd_bf16(const longread_sdpa_call *call, const void *q, const void *k, const void *v,
                                 const void *out, const void *dout, const float *stats, void *dq, void *dk, void *dv,
                                 int64_t grad_row_stride, int deterministic, void *workspace,
                                 int64_t *workspace_size) {
    auto pointers = pointers_of(*call, q, k, v);
    pointers[O] = const_cast<void *>(out);
    pointers[DO] = const_cast<void *>(dout);
    pointers[STATS] = const_cast<float *>(stats);
    pointers[DQ] = dq;
    pointers[DK] = dk;
    pointers[DV] = dv;
    return run(key_of(*call, true, grad_row_stride, true, deterministic != 0), pointers, workspace, workspace_size,
               call->stream);
}

}  // extern "C"
