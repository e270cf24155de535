#include "server/backends/cuda/device_table_cache.h"

#include "absl/strings/str_cat.h"
#include "server/backends/cuda/cuda_status.h"
#include "server/engine/status_macros.h"

namespace rope {

namespace {

absl::StatusOr<std::shared_ptr<const DeviceTable>> Upload(const RopeTable& host) {
  const int64_t bytes = host.byte_size();
  auto table = std::make_shared<DeviceTable>();
  const int64_t each = bytes / 2;
  const std::string what = absl::StrCat("the table ", host.key().DebugString());
  ROPE_RETURN_IF_ERROR(table->cos.Reserve(each, what));
  ROPE_RETURN_IF_ERROR(table->sin.Reserve(each, what));
  ROPE_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(table->cos.data(), host.cos_data(), each, cudaMemcpyHostToDevice),
      absl::StrCat("uploading ", what));
  ROPE_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(table->sin.data(), host.sin_data(), each, cudaMemcpyHostToDevice),
      absl::StrCat("uploading ", what));
  // A pageable-memory cudaMemcpy may return before its DMA lands; the
  // kernels that read the table run on other (non-blocking) streams.
  ROPE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(cudaStreamLegacy),
                            absl::StrCat("uploading ", what));
  return std::shared_ptr<const DeviceTable>(std::move(table));
}

}  // namespace

absl::StatusOr<std::shared_ptr<const DeviceTable>> DeviceTableCache::Get(const RopeTable& host) {
  // A per-request table (M-RoPE) shares its key with no other table's
  // contents: upload it for this call only.
  if (host.per_request()) return Upload(host);
  return cache_.Get(host.key(), host.byte_size(), [&host] { return Upload(host); });
}

}  // namespace rope
