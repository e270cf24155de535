#include "server/backends/cuda/device_table_cache.h"

#include "absl/strings/str_cat.h"
#include "server/backends/cuda/cuda_status.h"
#include "common/status_macros.h"

namespace rope {

namespace {

absl::StatusOr<std::shared_ptr<const DeviceTable>> Upload(const RopeTable& host) {
  const int64_t bytes = host.byte_size();
  // Allocated, filled and (in DeviceBuffer::Release) freed in order on the
  // calling thread's per-thread stream, which outlives every worker context:
  // a table may outlive the call, and the context, that uploaded it.
  // Complete before it is returned, so that kernels on any stream may read
  // it. It is freed only when no call holds it, and every call quiesces its
  // streams before dropping it (cuda_backend.cc), so no kernel still reads it
  // then.
  auto table = std::make_shared<DeviceTable>();
  const int64_t each = bytes / 2;
  const std::string what = absl::StrCat("the table ", host.key().DebugString());
  ROPE_RETURN_IF_ERROR(table->cos.Reserve(each, what, cudaStreamPerThread));
  ROPE_RETURN_IF_ERROR(table->sin.Reserve(each, what, cudaStreamPerThread));
  ROPE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(table->cos.data(), host.cos_data(), each,
                                            cudaMemcpyHostToDevice, cudaStreamPerThread),
                            absl::StrCat("uploading ", what));
  ROPE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(table->sin.data(), host.sin_data(), each,
                                            cudaMemcpyHostToDevice, cudaStreamPerThread),
                            absl::StrCat("uploading ", what));
  ROPE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(cudaStreamPerThread),
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
