#include "core/backends/cuda/device_table_cache.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "core/backends/cuda/cuda_status.h"

namespace rope {

namespace {

absl::StatusOr<std::shared_ptr<const DeviceBlock>> Upload(const TableBlock& host,
                                                          const std::string& what) {
  // Allocated, filled and (in DeviceBuffer::Release) freed in order on the
  // calling thread's per-thread stream, which outlives every worker context:
  // a block may outlive the call, and the context, that uploaded it.
  // Complete before it is returned, so that kernels on any stream may read
  // it. It is freed only when no call holds it, and every call quiesces its
  // streams before dropping it (cuda_backend.cc), so no kernel still reads it
  // then.
  auto block = std::make_shared<DeviceBlock>();
  const int64_t each = host.byte_size() / 2;
  ROPE_RETURN_IF_ERROR(block->cos.Reserve(each, what, cudaStreamPerThread));
  ROPE_RETURN_IF_ERROR(block->sin.Reserve(each, what, cudaStreamPerThread));
  ROPE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(block->cos.data(), host.cos(), each,
                                            cudaMemcpyHostToDevice, cudaStreamPerThread),
                            absl::StrCat("uploading ", what));
  ROPE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(block->sin.data(), host.sin(), each,
                                            cudaMemcpyHostToDevice, cudaStreamPerThread),
                            absl::StrCat("uploading ", what));
  ROPE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(cudaStreamPerThread),
                            absl::StrCat("uploading ", what));
  return std::shared_ptr<const DeviceBlock>(std::move(block));
}

}  // namespace

absl::StatusOr<DeviceTable> DeviceTableCache::Get(const RopeTable& host) {
  DeviceTable table;
  const int64_t slots = host.block_slots();
  table.blocks.resize(slots);
  table.cos_blocks.assign(slots, nullptr);
  table.sin_blocks.assign(slots, nullptr);
  table.first_block = host.first_block();
  table.block_shift = host.block_shift();
  table.half = host.half();
  const int64_t budget = cache_.stats().budget_bytes;
  if (!host.per_request() && host.byte_size() > budget) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "table for ", host.key().DebugString(), ": the blocks of rows this call touches need ",
        host.byte_size(), " bytes: over the device table-cache budget of ", budget, " bytes"));
  }
  for (int64_t slot = 0; slot < slots; ++slot) {
    const std::shared_ptr<const TableBlock>& block = host.block(slot);
    if (block == nullptr) continue;
    const TableBlockKey key{host.key(), host.first_block() + slot};
    std::shared_ptr<const DeviceBlock> device;
    if (host.per_request()) {
      // A per-request table (M-RoPE, axial RoPE, fractional positions:
      // core/engine/request_rows.h) shares its key with no other table's
      // contents: upload it for this call only.
      ROPE_ASSIGN_OR_RETURN(device, Upload(*block, "the per-request rows of a call"));
    } else {
      ROPE_ASSIGN_OR_RETURN(device, cache_.Get(key, block->byte_size(), [&block, &key] {
        return Upload(*block, absl::StrCat("the table block ", key.DebugString()));
      }));
    }
    table.cos_blocks[slot] = static_cast<const float*>(device->cos.data());
    table.sin_blocks[slot] = static_cast<const float*>(device->sin.data());
    table.blocks[slot] = std::move(device);
  }
  return table;
}

}  // namespace rope
