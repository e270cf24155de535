#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/backends/cuda/cuda_ops.h"
#include "core/backends/cuda/cuda_status.h"
#include "core/backends/cuda/kernel_launchers.h"
#include "common/status_macros.h"

namespace rope {
namespace {

constexpr int64_t kAlign = 256;  // q and k parts of a slot start on this boundary

int64_t AlignUp(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

kernels::Storage StorageOf(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
      return kernels::Storage::kFloat16;
    case DType::kBFloat16:
      return kernels::Storage::kBFloat16;
    case DType::kFloat32:
    case DType::kFloat8E4M3:  // never an input: float8 is an output type only
    case DType::kFloat8E5M2:
      break;
  }
  return kernels::Storage::kFloat32;
}

absl::Status UploadPositions(WorkerContext& context, math::PositionSpec* specs, int count) {
  int64_t total = 0;
  for (int i = 0; i < count; ++i) total += specs[i].count;
  if (total == 0) return absl::OkStatus();
  const int64_t bytes = total * static_cast<int64_t>(sizeof(int64_t));
  ROPE_RETURN_IF_ERROR(context.positions_host.Reserve(bytes, "explicit positions"));
  ROPE_RETURN_IF_ERROR(
      context.positions.Reserve(bytes, "explicit positions", context.compute_stream()));
  int64_t* host = reinterpret_cast<int64_t*>(context.positions_host.data());
  int64_t* device = static_cast<int64_t*>(context.positions.data());
  int64_t offset = 0;
  for (int i = 0; i < count; ++i) {
    if (specs[i].count == 0) continue;
    std::memcpy(host + offset, specs[i].explicit_positions, specs[i].count * sizeof(int64_t));
    specs[i].explicit_positions = device + offset;
    offset += specs[i].count;
  }
  ROPE_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, context.compute_stream()),
      "copying explicit positions to the device");
  // The other slot's stream runs kernels that read them too.
  return context.SlotsWaitForCompute();
}

absl::StatusOr<TableRows> UploadTableRows(WorkerContext& context, const DeviceTable& table) {
  const int64_t slots = static_cast<int64_t>(table.cos_blocks.size());
  const int64_t bytes = 2 * slots * static_cast<int64_t>(sizeof(const float*));
  TableRows rows;
  rows.first_block = table.first_block;
  rows.block_shift = table.block_shift;
  rows.half = table.half;
  if (slots == 0) return rows;
  ROPE_RETURN_IF_ERROR(context.table_rows_host.Reserve(bytes, "table block pointers"));
  ROPE_RETURN_IF_ERROR(
      context.table_rows.Reserve(bytes, "table block pointers", context.compute_stream()));
  const float** host = reinterpret_cast<const float**>(context.table_rows_host.data());
  std::memcpy(host, table.cos_blocks.data(), slots * sizeof(const float*));
  std::memcpy(host + slots, table.sin_blocks.data(), slots * sizeof(const float*));
  const float** device = static_cast<const float**>(context.table_rows.data());
  ROPE_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, context.compute_stream()),
      "copying the table's block pointers to the device");
  rows.cos_blocks = device;
  rows.sin_blocks = device + slots;
  // The other slot's stream runs kernels that read them too.
  ROPE_RETURN_IF_ERROR(context.SlotsWaitForCompute());
  return rows;
}

namespace {

// The kernel's parameters for args (everything but q, k and the tokens),
// with positions and table rows uploaded on the context's compute stream.
absl::StatusOr<kernels::RotateKernelParams> RotateParamsOnDevice(WorkerContext& context,
                                                                 const DeviceTable& table,
                                                                 const RotateArgs& args) {
  math::PositionSpec positions = args.positions;
  ROPE_RETURN_IF_ERROR(UploadPositions(context, &positions, 1));
  kernels::RotateKernelParams p;
  p.q_heads = static_cast<int>(args.q_heads);
  p.k_heads = static_cast<int>(args.k_heads);
  p.head_dim = static_cast<int>(args.head_dim);
  p.rotary_dim = static_cast<int>(args.rotary_dim);
  p.rotary_offset = static_cast<int>(args.rotary_offset);
  ROPE_ASSIGN_OR_RETURN(p.table, UploadTableRows(context, table));
  p.positions = positions;
  p.inverse = args.inverse;
  return p;
}

}  // namespace

absl::Status CudaRotateOnDevice(WorkerContext& context, const DeviceTable& table,
                                const RotateArgs& args, int64_t max_blocks) {
  const int64_t tokens = args.batch * args.seq;
  if (tokens == 0) return absl::OkStatus();
  ROPE_ASSIGN_OR_RETURN(kernels::RotateKernelParams p, RotateParamsOnDevice(context, table, args));
  // Out of place: the output first receives the input, on the stream the
  // kernel then runs on.
  const int64_t elem = static_cast<int64_t>(DTypeSize(args.dtype));
  const std::pair<const void*, void*> copies[] = {{args.q_source, args.q},
                                                  {args.k_source, args.k}};
  const int64_t token_bytes[] = {args.q_heads * args.head_dim * elem,
                                 args.k_heads * args.head_dim * elem};
  for (int i = 0; i < 2; ++i) {
    if (copies[i].first == nullptr || copies[i].second == nullptr) continue;
    ROPE_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(copies[i].second, copies[i].first, tokens * token_bytes[i],
                        cudaMemcpyDeviceToDevice, context.compute_stream()),
        "copying CUDA shared memory into an output reference");
  }
  p.q = args.q;
  p.k = args.k;
  p.tokens = tokens;
  p.first_token = 0;
  kernels::LaunchConfig launch;
  launch.stream = context.compute_stream();
  launch.max_blocks = max_blocks;
  ROPE_CUDA_RETURN_IF_ERROR(
      kernels::Rotate(p, StorageOf(args.dtype), args.layout == Layout::kInterleaved, launch),
      "launching the rotate kernel on CUDA shared memory");
  ROPE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(context.compute_stream()),
                            "rotating CUDA shared memory");
  return absl::OkStatus();
}

namespace {

// Rotation into float8: q and k uploaded whole to the context's workspaces,
// one launch writes the float8 outputs to two more, and they are downloaded
// to args.q_out / k_out (the attention path's staged copies).
absl::Status CudaRotateFloat8(WorkerContext& context, const DeviceTable& table,
                              const RotateArgs& args, int64_t max_blocks) {
  const int64_t elem = static_cast<int64_t>(DTypeSize(args.dtype));
  const int64_t tokens = args.batch * args.seq;
  const int64_t q_elems = tokens * args.q_heads * args.head_dim;
  const int64_t k_elems = args.k != nullptr ? tokens * args.k_heads * args.head_dim : 0;
  const cudaStream_t compute = context.compute_stream();
  ROPE_RETURN_IF_ERROR(context.q_in.Reserve(q_elems * elem, "q", compute));
  ROPE_RETURN_IF_ERROR(context.qf.Reserve(q_elems, "float8 q", compute));
  if (k_elems > 0) {
    ROPE_RETURN_IF_ERROR(context.k_in.Reserve(k_elems * elem, "k", compute));
    ROPE_RETURN_IF_ERROR(context.kf.Reserve(k_elems, "float8 k", compute));
  }
  ROPE_RETURN_IF_ERROR(context.SlotsWaitForCompute());
  ROPE_RETURN_IF_ERROR(context.UploadStaged(args.q, context.q_in.data(), q_elems * elem));
  if (k_elems > 0) {
    ROPE_RETURN_IF_ERROR(context.UploadStaged(args.k, context.k_in.data(), k_elems * elem));
  }
  math::PositionSpec positions = args.positions;
  ROPE_RETURN_IF_ERROR(UploadPositions(context, &positions, 1));
  kernels::RotateFloat8Params p;
  p.q = context.q_in.data();
  p.q_out = static_cast<uint8_t*>(context.qf.data());
  p.q_heads = static_cast<int>(args.q_heads);
  p.q_scale = args.q_scale;
  if (k_elems > 0) {
    p.k = context.k_in.data();
    p.k_out = static_cast<uint8_t*>(context.kf.data());
    p.k_heads = static_cast<int>(args.k_heads);
    p.k_scale = args.k_scale;
  }
  p.tokens = tokens;
  p.head_dim = static_cast<int>(args.head_dim);
  p.rotary_dim = static_cast<int>(args.rotary_dim);
  p.rotary_offset = static_cast<int>(args.rotary_offset);
  ROPE_ASSIGN_OR_RETURN(p.table, UploadTableRows(context, table));
  p.positions = positions;
  p.inverse = args.inverse;
  p.e5m2 = args.output_dtype == DType::kFloat8E5M2;
  kernels::LaunchConfig launch;
  launch.stream = compute;
  launch.max_blocks = max_blocks;
  ROPE_CUDA_RETURN_IF_ERROR(
      kernels::RotateFloat8(p, StorageOf(args.dtype), args.layout == Layout::kInterleaved, launch),
      "launching the float8 rotate kernel");
  ROPE_RETURN_IF_ERROR(context.DownloadStaged(context.qf.data(), args.q_out, q_elems));
  if (k_elems > 0) {
    ROPE_RETURN_IF_ERROR(context.DownloadStaged(context.kf.data(), args.k_out, k_elems));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CudaRotate(WorkerContext& context, const DeviceTable& table, const RotateArgs& args,
                        int64_t max_blocks) {
  if (IsFloat8(args.output_dtype)) return CudaRotateFloat8(context, table, args, max_blocks);
  const int64_t elem = static_cast<int64_t>(DTypeSize(args.dtype));
  const int64_t q_token = args.q_heads * args.head_dim * elem;
  const int64_t k_token = args.k != nullptr ? args.k_heads * args.head_dim * elem : 0;
  const int64_t tokens = args.batch * args.seq;
  if (tokens == 0) return absl::OkStatus();

  // Tokens per chunk: as many as fit a staging slot (q part, then k part on
  // an aligned offset); at least one, growing the slots if one token does
  // not fit.
  int64_t chunk = std::max<int64_t>(1, (context.staging_bytes() - kAlign) / (q_token + k_token));
  chunk = std::min(chunk, tokens);
  auto slot_bytes = [&](int64_t n) { return AlignUp(n * q_token) + n * k_token; };
  ROPE_RETURN_IF_ERROR(context.ReserveSlots(slot_bytes(chunk)));

  ROPE_ASSIGN_OR_RETURN(kernels::RotateKernelParams p, RotateParamsOnDevice(context, table, args));
  const kernels::Storage storage = StorageOf(args.dtype);
  const bool interleaved = args.layout == Layout::kInterleaved;

  char* q = static_cast<char*>(args.q);
  char* k = static_cast<char*>(args.k);
  // Read from the sources when the rotation is out of place; the rotated
  // tokens go back to q and k.
  const char* q_in = static_cast<const char*>(args.q_source != nullptr ? args.q_source : args.q);
  const char* k_in = static_cast<const char*>(args.k_source != nullptr ? args.k_source : args.k);
  int next = 0;
  for (int64_t first = 0; first < tokens; first += chunk, next ^= 1) {
    const int64_t n = std::min(chunk, tokens - first);
    const int64_t q_bytes = n * q_token, k_bytes = n * k_token;
    const int64_t k_offset = AlignUp(q_bytes);
    const int64_t span = k != nullptr ? k_offset + k_bytes : q_bytes;
    WorkerContext::Slot& slot = context.slot(next);
    ROPE_RETURN_IF_ERROR(context.Reuse(next));  // delivers the chunk before last
    std::memcpy(slot.host.data(), q_in + first * q_token, q_bytes);
    if (k != nullptr) std::memcpy(slot.host.data() + k_offset, k_in + first * k_token, k_bytes);
    char* device = static_cast<char*>(slot.device.data());
    ROPE_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(device, slot.host.data(), span, cudaMemcpyHostToDevice, slot.stream.get()),
        "copying q/k to the device");
    p.q = device;
    p.k = k != nullptr ? device + k_offset : nullptr;
    p.tokens = n;
    p.first_token = first;
    kernels::LaunchConfig launch;
    launch.stream = slot.stream.get();
    launch.max_blocks = max_blocks;
    ROPE_CUDA_RETURN_IF_ERROR(kernels::Rotate(p, storage, interleaved, launch),
                              "launching the rotate kernel");
    ROPE_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(slot.host.data(), device, span, cudaMemcpyDeviceToHost, slot.stream.get()),
        "copying rotated q/k from the device");
    ROPE_CUDA_RETURN_IF_ERROR(cudaEventRecord(slot.done.get(), slot.stream.get()),
                              "recording a staged copy");
    slot.in_flight = true;
    slot.copy_out.push_back(WorkerContext::CopyOut{q + first * q_token, 0, q_bytes});
    if (k != nullptr) {
      slot.copy_out.push_back(WorkerContext::CopyOut{k + first * k_token, k_offset, k_bytes});
    }
  }
  for (int i = 0; i < WorkerContext::kSlots; ++i) ROPE_RETURN_IF_ERROR(context.Reuse(i));
  return absl::OkStatus();
}

}  // namespace rope
