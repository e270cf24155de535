#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/backends/cuda/attention_chunks.h"
#include "core/backends/cuda/cuda_ops.h"
#include "core/backends/cuda/cuda_status.h"
#include "core/backends/cuda/gemm_plan.h"
#include "core/backends/cuda/kernel_launchers.h"
#include "common/status_macros.h"

namespace rope {
namespace {

cublasOperation_t ToCublas(kernels::GemmOp op) {
  return op == kernels::GemmOp::kT ? CUBLAS_OP_T : CUBLAS_OP_N;
}

absl::Status RunPlan(const WorkerContext& context, const std::vector<kernels::StridedGemm>& plan,
                     const float* a, const float* b, float* c, const char* what) {
  for (const kernels::StridedGemm& g : plan) {
    ROPE_CUBLAS_RETURN_IF_ERROR(
        context.cublas_api().sgemm_strided_batched(
            context.cublas(), ToCublas(g.op_a), ToCublas(g.op_b), g.m, g.n, g.k, &g.alpha,
            a + g.a_offset, g.lda, g.stride_a, b + g.b_offset, g.ldb, g.stride_b, &g.beta,
            c + g.c_offset, g.ldc, g.stride_c, g.batch),
        what);
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

// The float32 working copies both attention paths read, into the context's
// qf / kf / vf: q and k rotated at their positions (already uploaded) with the
// table's rows, v widened without rotation when `with_v`.
absl::Status LaunchRotatedCopies(WorkerContext& context, const DeviceTable& table,
                                 const AttentionArgs& args, const math::PositionSpec* positions,
                                 const void* q_in, const void* k_in, const void* v_in, bool with_v,
                                 const kernels::LaunchConfig& launch) {
  const kernels::Storage storage = StorageOf(args.dtype);
  const bool interleaved = args.layout == Layout::kInterleaved;
  kernels::RotatedCopyParams copy;
  copy.head_dim = static_cast<int>(args.head_dim);
  copy.rotary_dim = static_cast<int>(args.rotary_dim);
  copy.rotary_offset = static_cast<int>(args.rotary_offset);
  ROPE_ASSIGN_OR_RETURN(copy.table, UploadTableRows(context, table));
  copy.in = q_in;
  copy.out = static_cast<float*>(context.qf.data());
  copy.tokens = args.batch * args.q_seq;
  copy.heads = static_cast<int>(args.q_heads);
  copy.positions = positions[0];
  ROPE_CUDA_RETURN_IF_ERROR(kernels::RotatedCopy(copy, storage, interleaved, launch),
                            "launching the rotated copy of q");
  copy.in = k_in;
  copy.out = static_cast<float*>(context.kf.data());
  copy.tokens = args.batch * args.k_seq;
  copy.heads = static_cast<int>(args.k_heads);
  copy.positions = positions[1];
  ROPE_CUDA_RETURN_IF_ERROR(kernels::RotatedCopy(copy, storage, interleaved, launch),
                            "launching the rotated copy of k");
  if (with_v) {
    copy.in = v_in;
    copy.out = static_cast<float*>(context.vf.data());
    copy.head_dim = static_cast<int>(args.v_dim);
    copy.rotary_dim = 0;  // a plain widening copy
    copy.rotary_offset = 0;
    ROPE_CUDA_RETURN_IF_ERROR(kernels::RotatedCopy(copy, storage, interleaved, launch),
                              "launching the float32 copy of v");
  }
  return absl::OkStatus();
}

// The tiled path (flash_attention_body.h) for every call that is not
// legacy: rotated float32 copies of q and k (and v) on the device, then the
// forward kernel (OUTPUT, LSE), the rows kernel (SCORES, SCORE_ROWS, TOP_K)
// and the key-mass kernel, in chunks of rows between which the call checks
// its interrupt. No q_seq x k_seq buffer exists unless SCORES is asked.
absl::Status CudaTiledAttention(WorkerContext& context, const DeviceTable& table,
                                const AttentionArgs& args, int64_t max_blocks,
                                double chunk_work) {
  auto stop = [&args]() {
    return args.interrupt != nullptr ? args.interrupt->Check("AttentionScores")
                                     : absl::OkStatus();
  };
  const int64_t elem = static_cast<int64_t>(DTypeSize(args.dtype));
  const int64_t f = static_cast<int64_t>(sizeof(float));
  const int64_t q_elems = args.batch * args.q_seq * args.q_heads * args.head_dim;
  const int64_t k_elems = args.batch * args.k_seq * args.k_heads * args.head_dim;
  const bool with_v = args.v != nullptr && args.output != nullptr;
  const int64_t v_elems = with_v ? args.batch * args.k_seq * args.k_heads * args.v_dim : 0;
  const int64_t rows = args.batch * args.q_heads * args.q_seq;
  const bool staged = args.memory.is_host();
  const bool rows_pass =
      args.scores != nullptr || args.score_rows != nullptr || args.top_k_indices != nullptr;
  const bool needs_lse = args.lse != nullptr || args.top_k_indices != nullptr ||
                         args.key_mass != nullptr || with_v ||
                         (args.softmax && (args.scores != nullptr || args.score_rows != nullptr));

  // Every result and workspace reserved before any work.
  struct Result {
    void* host;         // the caller's host buffer (or device range when not staged)
    DeviceBuffer* buffer;
    int64_t bytes;
    const char* what;
  };
  std::vector<Result> results;
  auto add = [&](void* host, DeviceBuffer* buffer, int64_t bytes, const char* what) {
    if (host != nullptr) results.push_back({host, buffer, bytes, what});
  };
  add(args.scores, &context.scores, rows * args.k_seq * f, "attention scores");
  add(args.output, &context.output, with_v ? rows * args.v_dim * f : 0, "attention output");
  add(args.lse, &context.lse, rows * f, "log-sum-exp");
  add(args.top_k_indices, &context.top_k_indices,
      rows * args.top_k * static_cast<int64_t>(sizeof(int32_t)), "top-k indices");
  add(args.top_k_probs, &context.top_k_probs, rows * args.top_k * f, "top-k probabilities");
  add(args.key_mass, &context.key_mass, args.batch * args.q_heads * args.k_seq * f, "key mass");
  add(args.score_rows, &context.score_rows,
      args.batch * args.q_heads * args.score_rows_count * args.k_seq * f, "score rows");
  const cudaStream_t compute = context.compute_stream();
  if (staged) {
    ROPE_RETURN_IF_ERROR(context.q_in.Reserve(q_elems * elem, "q", compute));
    ROPE_RETURN_IF_ERROR(context.k_in.Reserve(k_elems * elem, "k", compute));
    if (with_v) ROPE_RETURN_IF_ERROR(context.v_in.Reserve(v_elems * elem, "v", compute));
    for (const Result& r : results) {
      ROPE_RETURN_IF_ERROR(r.buffer->Reserve(r.bytes, r.what, compute));
    }
  }
  if (needs_lse && (staged || args.lse == nullptr)) {
    ROPE_RETURN_IF_ERROR(context.lse.Reserve(rows * f, "log-sum-exp", compute));
  }
  ROPE_RETURN_IF_ERROR(context.qf.Reserve(q_elems * f, "rotated q (float32)", compute));
  ROPE_RETURN_IF_ERROR(context.kf.Reserve(k_elems * f, "rotated k (float32)", compute));
  if (with_v) ROPE_RETURN_IF_ERROR(context.vf.Reserve(v_elems * f, "v (float32)", compute));
  const int64_t heads_bytes = 2 * args.q_heads * f;
  ROPE_RETURN_IF_ERROR(context.head_values.Reserve(heads_bytes, "sinks and slopes", compute));
  ROPE_RETURN_IF_ERROR(context.head_values_host.Reserve(heads_bytes, "sinks and slopes"));
  ROPE_RETURN_IF_ERROR(context.SlotsWaitForCompute());

  const void* q_in = args.q;
  const void* k_in = args.k;
  const void* v_in = args.v;
  if (staged) {
    ROPE_RETURN_IF_ERROR(context.UploadStaged(args.q, context.q_in.data(), q_elems * elem, stop));
    ROPE_RETURN_IF_ERROR(context.UploadStaged(args.k, context.k_in.data(), k_elems * elem, stop));
    if (with_v) {
      ROPE_RETURN_IF_ERROR(
          context.UploadStaged(args.v, context.v_in.data(), v_elems * elem, stop));
    }
    q_in = context.q_in.data();
    k_in = context.k_in.data();
    v_in = context.v_in.data();
  }
  math::PositionSpec positions[2] = {args.q_positions, args.k_positions};
  ROPE_RETURN_IF_ERROR(UploadPositions(context, positions, 2));
  // Sinks and ALiBi slopes, one float per query head each.
  float* heads_host = reinterpret_cast<float*>(context.head_values_host.data());
  float* heads_device = static_cast<float*>(context.head_values.data());
  for (int64_t h = 0; h < args.q_heads; ++h) {
    heads_host[h] = args.sinks != nullptr ? args.sinks[h] : 0.0f;
    heads_host[args.q_heads + h] = args.alibi_slopes != nullptr ? args.alibi_slopes[h] : 0.0f;
  }
  ROPE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(heads_device, heads_host, heads_bytes,
                                            cudaMemcpyHostToDevice, compute),
                            "copying sinks and ALiBi slopes to the device");

  kernels::LaunchConfig launch;
  launch.stream = compute;
  launch.max_blocks = max_blocks;
  float* qf = static_cast<float*>(context.qf.data());
  float* kf = static_cast<float*>(context.kf.data());
  float* vf = static_cast<float*>(context.vf.data());
  ROPE_RETURN_IF_ERROR(
      LaunchRotatedCopies(context, table, args, positions, q_in, k_in, v_in, with_v, launch));

  // Where each result goes on the device: the caller's range, or the
  // context's workspace (downloaded at the end).
  auto device = [&](void* host, DeviceBuffer& buffer) -> void* {
    if (host == nullptr) return nullptr;
    return staged ? buffer.data() : host;
  };
  kernels::FlashAttentionParams p;
  p.q = qf;
  p.k = kf;
  p.v = with_v ? vf : nullptr;
  p.output = static_cast<float*>(device(args.output, context.output));
  p.lse = args.lse != nullptr && !staged ? args.lse
                                         : (needs_lse ? static_cast<float*>(context.lse.data())
                                                      : nullptr);
  p.scores = static_cast<float*>(device(args.scores, context.scores));
  p.score_rows = static_cast<float*>(device(args.score_rows, context.score_rows));
  p.score_rows_start = args.score_rows_start;
  p.score_rows_count = args.score_rows_count;
  p.top_k_indices = static_cast<int32_t*>(device(args.top_k_indices, context.top_k_indices));
  p.top_k_probs = static_cast<float*>(device(args.top_k_probs, context.top_k_probs));
  p.top_k = args.top_k;
  p.key_mass = static_cast<float*>(device(args.key_mass, context.key_mass));
  p.softmax = args.softmax;
  p.batch = args.batch;
  p.q_seq = args.q_seq;
  p.k_seq = args.k_seq;
  p.q_heads = args.q_heads;
  p.k_heads = args.k_heads;
  p.head_dim = args.head_dim;
  p.v_dim = with_v ? args.v_dim : 0;
  p.q_positions = positions[0];
  p.k_positions = positions[1];
  p.mask = args.mask;
  p.scale = args.scale;
  p.softcap = args.softcap;
  p.sinks = args.sinks != nullptr ? heads_device : nullptr;
  p.alibi_slopes = args.alibi_slopes != nullptr ? heads_device + args.q_heads : nullptr;

  // Rows in chunks of about chunk_work (attention_chunks.h's estimate per
  // score), at most kProgressMarks chunks ahead of the device.
  kernels::AttentionDims dims;
  dims.head_dim = args.head_dim;
  dims.v_dim = p.v_dim;
  const double row_work = static_cast<double>(args.k_seq) * kernels::WorkPerScore(dims);
  const int64_t per_chunk =
      std::max<int64_t>(1, static_cast<int64_t>(std::min(chunk_work / row_work, 1e15)));
  constexpr size_t kMarks = WorkerContext::kProgressMarks;
  size_t chunk = 0;
  auto run_rows = [&](cudaError_t (*launcher)(const kernels::FlashAttentionParams&,
                                              const kernels::LaunchConfig&),
                      const char* what) -> absl::Status {
    for (int64_t begin = 0; begin < rows; begin += per_chunk, ++chunk) {
      if (chunk >= kMarks) {
        ROPE_RETURN_IF_ERROR(context.WaitForProgress(static_cast<int>(chunk % kMarks)));
      }
      ROPE_RETURN_IF_ERROR(stop());
      p.row_begin = begin;
      p.row_end = std::min(rows, begin + per_chunk);
      ROPE_CUDA_RETURN_IF_ERROR(launcher(p, launch), what);
      ROPE_RETURN_IF_ERROR(context.MarkProgress(static_cast<int>(chunk % kMarks)));
    }
    return absl::OkStatus();
  };
  if (needs_lse) {
    ROPE_RETURN_IF_ERROR(run_rows(kernels::FlashForward, "launching the attention forward kernel"));
  }
  if (rows_pass) {
    ROPE_RETURN_IF_ERROR(run_rows(kernels::FlashRows, "launching the attention rows kernel"));
  }
  if (args.key_mass != nullptr) {
    ROPE_RETURN_IF_ERROR(stop());
    ROPE_CUDA_RETURN_IF_ERROR(kernels::FlashKeyMass(p, launch), "launching the key-mass kernel");
  }

  if (!staged) {
    ROPE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute),
                              "computing attention on CUDA shared memory");
    return absl::OkStatus();
  }
  for (const Result& r : results) {
    ROPE_RETURN_IF_ERROR(context.DownloadStaged(r.buffer->data(), r.host, r.bytes, stop));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CudaAttentionScores(WorkerContext& context, const DeviceTable& table,
                                 const AttentionArgs& args, int64_t max_blocks,
                                 double chunk_work) {
  if (!args.legacy) return CudaTiledAttention(context, table, args, max_blocks, chunk_work);
  // Polled before each staging chunk and each compute chunk; on a stop the
  // caller's lease quiesces the context (what is enqueued runs out).
  auto stop = [&args]() {
    return args.interrupt != nullptr ? args.interrupt->Check("AttentionScores")
                                     : absl::OkStatus();
  };
  const int64_t elem = static_cast<int64_t>(DTypeSize(args.dtype));
  const int64_t q_elems = args.batch * args.q_seq * args.q_heads * args.head_dim;
  const int64_t k_elems = args.batch * args.k_seq * args.k_heads * args.head_dim;
  const int64_t v_elems =
      args.v != nullptr ? args.batch * args.k_seq * args.k_heads * args.v_dim : 0;
  const int64_t score_elems = args.batch * args.q_heads * args.q_seq * args.k_seq;
  const int64_t out_elems =
      args.v != nullptr ? args.batch * args.q_seq * args.q_heads * args.v_dim : 0;
  const int64_t f = static_cast<int64_t>(sizeof(float));

  // Device memory first: a request too large for the device fails here,
  // before any work is enqueued. Allocated in order on the compute stream;
  // the other slot's stream, which also copies q, k, v in and the results
  // out, is then ordered after the allocations.
  // In device memory (args.memory) the inputs are read, and the scores and
  // output written, where they lie: no staging buffers, no copies.
  const cudaStream_t compute = context.compute_stream();
  const bool staged = args.memory.is_host();
  if (staged) {
    ROPE_RETURN_IF_ERROR(context.q_in.Reserve(q_elems * elem, "q", compute));
    ROPE_RETURN_IF_ERROR(context.k_in.Reserve(k_elems * elem, "k", compute));
    ROPE_RETURN_IF_ERROR(context.scores.Reserve(score_elems * f, "attention scores", compute));
  }
  ROPE_RETURN_IF_ERROR(context.qf.Reserve(q_elems * f, "rotated q (float32)", compute));
  ROPE_RETURN_IF_ERROR(context.kf.Reserve(k_elems * f, "rotated k (float32)", compute));
  const bool separate_probs = args.v != nullptr && !args.softmax;
  if (separate_probs) {
    ROPE_RETURN_IF_ERROR(
        context.probs.Reserve(score_elems * f, "attention probabilities", compute));
  }
  if (args.v != nullptr) {
    if (staged) {
      ROPE_RETURN_IF_ERROR(context.v_in.Reserve(v_elems * elem, "v", compute));
      ROPE_RETURN_IF_ERROR(context.output.Reserve(out_elems * f, "attention output", compute));
    }
    ROPE_RETURN_IF_ERROR(context.vf.Reserve(v_elems * f, "v (float32)", compute));
  }
  ROPE_RETURN_IF_ERROR(context.SlotsWaitForCompute());

  const void* q_in = args.q;
  const void* k_in = args.k;
  const void* v_in = args.v;
  if (staged) {
    ROPE_RETURN_IF_ERROR(context.UploadStaged(args.q, context.q_in.data(), q_elems * elem, stop));
    ROPE_RETURN_IF_ERROR(context.UploadStaged(args.k, context.k_in.data(), k_elems * elem, stop));
    if (args.v != nullptr) {
      ROPE_RETURN_IF_ERROR(
          context.UploadStaged(args.v, context.v_in.data(), v_elems * elem, stop));
    }
    q_in = context.q_in.data();
    k_in = context.k_in.data();
    v_in = context.v_in.data();
  }
  math::PositionSpec positions[2] = {args.q_positions, args.k_positions};
  ROPE_RETURN_IF_ERROR(UploadPositions(context, positions, 2));

  kernels::LaunchConfig launch;
  launch.stream = context.compute_stream();
  launch.max_blocks = max_blocks;
  float* qf = static_cast<float*>(context.qf.data());
  float* kf = static_cast<float*>(context.kf.data());
  float* vf = static_cast<float*>(context.vf.data());
  float* scores = staged ? static_cast<float*>(context.scores.data()) : args.scores;

  ROPE_RETURN_IF_ERROR(LaunchRotatedCopies(context, table, args, positions, q_in, k_in, v_in,
                                           args.v != nullptr, launch));

  kernels::AttentionDims dims;
  dims.batch = args.batch;
  dims.q_seq = args.q_seq;
  dims.k_seq = args.k_seq;
  dims.q_heads = args.q_heads;
  dims.k_heads = args.k_heads;
  dims.head_dim = args.head_dim;
  dims.v_dim = args.v_dim;

  kernels::MaskSoftmaxParams mask;
  mask.scores = scores;
  mask.probs = separate_probs ? static_cast<float*>(context.probs.data()) : nullptr;
  mask.batch = args.batch;
  mask.heads = args.q_heads;
  mask.q_seq = args.q_seq;
  mask.k_seq = args.k_seq;
  mask.q_positions = positions[0];
  mask.k_positions = positions[1];
  mask.causal = args.causal;
  mask.softmax = args.softmax;
  float* output = staged ? static_cast<float*>(context.output.data()) : args.output;
  const float* probs = separate_probs ? mask.probs : scores;

  // Chunk by chunk (attention_chunks.h), checking `stop` before each. The
  // host runs at most kProgressMarks chunks ahead of the device: before
  // enqueueing chunk c it waits for chunk c - kProgressMarks, so a check
  // sees real progress while the device always has the next chunk queued.
  // A call within one chunk's budget is enqueued at once, as one chunk.
  const std::vector<kernels::AttentionBlock> chunks =
      kernels::PlanAttentionChunks(dims, chunk_work);
  constexpr size_t kMarks = WorkerContext::kProgressMarks;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const kernels::AttentionBlock& chunk = chunks[c];
    if (c >= kMarks) ROPE_RETURN_IF_ERROR(context.WaitForProgress(static_cast<int>(c % kMarks)));
    ROPE_RETURN_IF_ERROR(stop());
    ROPE_RETURN_IF_ERROR(RunPlan(context, kernels::PlanScoreGemms(dims, args.scale, chunk), kf, qf,
                                 scores, "cublasSgemmStridedBatched (scores)"));
    mask.row_begin = kernels::BlockRowBegin(dims, chunk);
    mask.row_end = kernels::BlockRowEnd(dims, chunk);
    ROPE_CUDA_RETURN_IF_ERROR(kernels::MaskSoftmax(mask, launch), "launching the softmax kernel");
    if (args.v != nullptr) {
      ROPE_RETURN_IF_ERROR(RunPlan(context, kernels::PlanOutputGemms(dims, chunk), vf, probs,
                                   output, "cublasSgemmStridedBatched (output)"));
    }
    if (chunks.size() > 1) {
      ROPE_RETURN_IF_ERROR(context.MarkProgress(static_cast<int>(c % kMarks)));
    }
  }

  if (!staged) {
    ROPE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute),
                              "computing attention on CUDA shared memory");
    return absl::OkStatus();
  }
  ROPE_RETURN_IF_ERROR(context.DownloadStaged(scores, args.scores, score_elems * f, stop));
  if (args.v != nullptr) {
    ROPE_RETURN_IF_ERROR(context.DownloadStaged(output, args.output, out_elems * f, stop));
  }
  return absl::OkStatus();
}

}  // namespace rope
