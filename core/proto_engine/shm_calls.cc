#include "core/proto_engine/shm_calls.h"

#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "core/proto_engine/request_conversion.h"
#include "core/engine/dtype.h"

namespace rope {
namespace {

// One request's references: their leases, ranges and the overlap rules.
class ShmCallScope {
 public:
  ShmCallScope(const ShmRegistry& registry, const std::string& owner)
      : registry_(registry), owner_(owner) {}

  // The address of `ref` after every check but overlap (CheckOverlaps).
  // `tensor` groups an input with its own output (exact in place allowed).
  absl::StatusOr<char*> Resolve(const v1::SharedMemoryRef& ref, const std::string& field,
                                size_t alignment, bool output, int tensor) {
    ROPE_ASSIGN_OR_RETURN(std::shared_ptr<const MappedRegion> region,
                          registry_.Find(owner_, ref.region(), field));
    const uint64_t size = region->byte_size();
    if (ref.byte_size() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".byte_size is 0: must be > 0"));
    }
    if (ref.offset() > size || ref.byte_size() > size - ref.offset()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": offset ", ref.offset(), " + byte_size ", ref.byte_size(),
          " is past the end of region \"", ref.region(), "\" (", size, " bytes)"));
    }
    char* address = region->data() + ref.offset();
    if (reinterpret_cast<uintptr_t>(address) % alignment != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".offset ", ref.offset(), " is not aligned to the ", alignment,
          "-byte elements (region \"", ref.region(), "\" starts at object offset ",
          region->offset(), ")"));
    }
    ROPE_RETURN_IF_ERROR(region->Check());
    ranges_.push_back({region.get(), ref.offset(), ref.offset() + ref.byte_size(), field, output,
                       tensor, region->is_device()});
    leases_.push_back(std::move(region));
    return address;
  }

  // Marks the input range of `field` as written too (rotated in place).
  void AlsoOutput(const std::string& field) {
    for (size_t i = 0, n = ranges_.size(); i < n; ++i) {
      if (ranges_[i].field == field) {
        Range copy = ranges_[i];
        copy.output = true;
        ranges_.push_back(copy);
        return;
      }
    }
  }

  // Whether `a` and `b` name exactly the same bytes of the same region.
  bool Same(const std::string& a, const std::string& b) const {
    const Range* x = Find(a);
    const Range* y = Find(b);
    return x != nullptr && y != nullptr && x->region == y->region && x->begin == y->begin &&
           x->end == y->end;
  }

  // INVALID_ARGUMENT when an output overlaps another output, or an input
  // other than exactly its own.
  absl::Status CheckOverlaps() const {
    for (size_t i = 0; i < ranges_.size(); ++i) {
      const Range& out = ranges_[i];
      if (!out.output) continue;
      for (size_t j = 0; j < ranges_.size(); ++j) {
        const Range& other = ranges_[j];
        if (i == j || other.region != out.region) continue;
        if (other.end <= out.begin || out.end <= other.begin) continue;
        const bool in_place = !other.output && other.tensor == out.tensor &&
                              other.begin == out.begin && other.end == out.end;
        if (in_place) continue;
        if (other.output && other.tensor == out.tensor) continue;  // the same output twice
        return absl::InvalidArgumentError(absl::StrCat(
            out.field, " [", out.begin, ", ", out.end, ") overlaps ", other.field, " [",
            other.begin, ", ", other.end, ") in region \"", out.region->name(),
            "\": an output may only equal its own input exactly (in place)"));
      }
    }
    return absl::OkStatus();
  }

  // The first reference resolved into a region that is (device) or is not
  // (!device) CUDA device memory, as "field (region \"name\")"; empty if none.
  std::string FirstIn(bool device) const {
    for (const Range& range : ranges_) {
      if (range.device == device) {
        return absl::StrCat(range.field, " (region \"", range.region->name(), "\")");
      }
    }
    return "";
  }

  // FAILED_PRECONDITION when a region's backing object shrank during the call.
  absl::Status CheckAfter() const {
    for (const auto& region : leases_) {
      if (region->Faulted()) return region->Check();
    }
    return absl::OkStatus();
  }

 private:
  struct Range {
    const MappedRegion* region;
    uint64_t begin;
    uint64_t end;
    std::string field;
    bool output;
    int tensor;
    bool device;  // the region is CUDA device memory
  };
  const Range* Find(const std::string& field) const {
    for (const Range& range : ranges_) {
      if (range.field == field) return &range;
    }
    return nullptr;
  }

  const ShmRegistry& registry_;
  const std::string& owner_;
  std::vector<std::shared_ptr<const MappedRegion>> leases_;
  std::vector<Range> ranges_;
};

absl::Status NotBoth(const v1::Tensor& tensor, const std::string& field) {
  if (tensor.has_shm() && !tensor.data().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(field, " has both data (", tensor.data().size(),
                                                   " bytes) and shm: send one of them"));
  }
  return absl::OkStatus();
}

void AddSaturating(int64_t* total, uint64_t bytes) {
  constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  const uint64_t sum = static_cast<uint64_t>(*total) + std::min(bytes, kMax);
  *total = static_cast<int64_t>(std::min(sum, kMax));
}

void SetReference(const v1::Tensor& input_form, const v1::SharedMemoryRef& ref, v1::Tensor* out) {
  out->set_dtype(input_form.dtype());
  out->mutable_shape()->CopyFrom(input_form.shape());
  out->clear_data();
  *out->mutable_shm() = ref;
}

void MoveBytes(v1::Tensor* from, v1::Tensor* to) {
  to->set_dtype(from->dtype());
  to->mutable_shape()->Swap(from->mutable_shape());
  to->mutable_data()->swap(*from->mutable_data());
}

enum TensorId { kQ = 0, kK = 1, kV = 2, kScores = 3, kOutput = 4 };

}  // namespace

bool UsesSharedMemory(const v1::RotateRequest& request) {
  return request.q().has_shm() || request.k().has_shm() || request.has_q_out() ||
         request.has_k_out();
}

bool UsesSharedMemory(const v1::AttentionScoresRequest& request) {
  return request.q().has_shm() || request.k().has_shm() || request.v().has_shm() ||
         request.has_scores_out() || request.has_output_out();
}

int64_t ReferencedBytes(const v1::RotateRequest& request) {
  int64_t total = 0;
  if (request.q().has_shm()) AddSaturating(&total, request.q().shm().byte_size());
  if (request.k().has_shm()) AddSaturating(&total, request.k().shm().byte_size());
  if (request.has_q_out()) AddSaturating(&total, request.q_out().byte_size());
  if (request.has_k_out()) AddSaturating(&total, request.k_out().byte_size());
  return total;
}

int64_t ReferencedBytes(const v1::AttentionScoresRequest& request) {
  int64_t total = 0;
  for (const v1::Tensor* t : {&request.q(), &request.k(), &request.v()}) {
    if (t->has_shm()) AddSaturating(&total, t->shm().byte_size());
  }
  if (request.has_scores_out()) AddSaturating(&total, request.scores_out().byte_size());
  if (request.has_output_out()) AddSaturating(&total, request.output_out().byte_size());
  return total;
}

absl::Status AnswerRotateShared(Engine& engine, const ShmRegistry& registry,
                                const std::string& owner, v1::RotateRequest* request,
                                v1::RotateResponse* reply) {
  ROPE_RETURN_IF_ERROR(NotBoth(request->q(), "q"));
  ROPE_RETURN_IF_ERROR(NotBoth(request->k(), "k"));
  if (request->has_k_out() && !request->has_k()) {
    return absl::InvalidArgumentError("k_out is set but k is missing");
  }
  ROPE_ASSIGN_OR_RETURN(RotateParams params, RotateParamsFromProto(request));
  ShmCallScope scope(registry, owner);
  struct Slot {
    v1::Tensor* tensor;
    TensorView* view;
    const v1::SharedMemoryRef* out;
    std::string name;
    int id;
  };
  std::vector<Slot> slots = {{request->mutable_q(), &params.q,
                              request->has_q_out() ? &request->q_out() : nullptr, "q", kQ}};
  if (request->has_k()) {
    slots.push_back({request->mutable_k(), &params.k,
                     request->has_k_out() ? &request->k_out() : nullptr, "k", kK});
  }
  std::vector<char*> out_address(slots.size(), nullptr);
  for (Slot& slot : slots) {
    if (!slot.tensor->has_shm()) continue;
    const size_t element = DTypeSize(slot.view->dtype);
    ROPE_ASSIGN_OR_RETURN(char* address, scope.Resolve(slot.tensor->shm(), slot.name + ".shm",
                                                       element, false, slot.id));
    slot.view->data = address;
    slot.view->byte_size = slot.tensor->shm().byte_size();
  }
  for (size_t i = 0; i < slots.size(); ++i) {
    Slot& slot = slots[i];
    const std::string out_field = slot.name + "_out";
    if (slot.out == nullptr) {
      if (slot.tensor->has_shm()) scope.AlsoOutput(slot.name + ".shm");
      continue;
    }
    if (slot.out->byte_size() != slot.view->byte_size) {
      return absl::InvalidArgumentError(absl::StrCat(out_field, ".byte_size is ",
                                                     slot.out->byte_size(), ": ", slot.name,
                                                     " is ", slot.view->byte_size, " bytes"));
    }
    ROPE_ASSIGN_OR_RETURN(out_address[i], scope.Resolve(*slot.out, out_field,
                                                        DTypeSize(slot.view->dtype), true,
                                                        slot.id));
  }
  ROPE_RETURN_IF_ERROR(scope.CheckOverlaps());
  const std::string device_field = scope.FirstIn(/*device=*/true);
  if (!device_field.empty()) {
    // The backend rotates device memory where it is: every tensor of the
    // call must be there (a bytes tensor or a host region cannot join).
    std::string host_field = scope.FirstIn(/*device=*/false);
    for (const Slot& slot : slots) {
      if (!slot.tensor->has_shm()) host_field = absl::StrCat(slot.name, " (bytes)");
    }
    if (!host_field.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          device_field, " is CUDA device memory but ", host_field,
          " is not: one call's tensors are all in CUDA regions or none"));
    }
    params.on_device = true;
  }

  for (size_t i = 0; i < slots.size(); ++i) {
    if (out_address[i] == nullptr) continue;
    TensorView& view = *slots[i].view;
    if (out_address[i] != view.data) {
      if (params.on_device) {
        ROPE_RETURN_IF_ERROR(engine.CopyOnDevice(out_address[i], view.data, view.byte_size));
      } else {
        std::memcpy(out_address[i], view.data, view.byte_size);
      }
    }
    view.data = out_address[i];
  }
  ROPE_RETURN_IF_ERROR(engine.Rotate(params));
  ROPE_RETURN_IF_ERROR(scope.CheckAfter());

  v1::Tensor* reply_tensors[] = {reply->mutable_q(), reply->mutable_k()};
  for (size_t i = 0; i < slots.size(); ++i) {
    Slot& slot = slots[i];
    if (slot.out != nullptr) {
      SetReference(*slot.tensor, *slot.out, reply_tensors[i]);
    } else if (slot.tensor->has_shm()) {
      SetReference(*slot.tensor, slot.tensor->shm(), reply_tensors[i]);
    } else {
      MoveBytes(slot.tensor, reply_tensors[i]);
    }
  }
  return absl::OkStatus();
}

namespace {

// AttentionScores whose tensors are in CUDA regions (device_field names the
// first): every input and output must be, and the results go straight to
// scores_out / output_out on the device.
absl::Status AttentionOnDevice(Engine& engine, const ShmCallScope& scope,
                               const std::string& device_field,
                               const v1::AttentionScoresRequest& request, AttentionParams& params,
                               char* scores_address, char* output_address,
                               v1::AttentionScoresResponse* reply) {
  std::string host_field = scope.FirstIn(/*device=*/false);
  const std::pair<const v1::Tensor*, const char*> inputs[] = {
      {&request.q(), "q"}, {&request.k(), "k"}, {&request.v(), "v"}};
  for (const auto& [tensor, name] : inputs) {
    const bool present = tensor == &request.v() ? request.has_v() : true;
    if (present && !tensor->has_shm()) host_field = absl::StrCat(name, " (bytes)");
  }
  if (!host_field.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        device_field, " is CUDA device memory but ", host_field,
        " is not: one call's tensors are all in CUDA regions or none"));
  }
  if (scores_address == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scores_out is not set: with ", device_field,
        " in CUDA memory the scores go to a CUDA region (scores_out)"));
  }
  if (request.has_v() && output_address == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "output_out is not set: with ", device_field,
        " in CUDA memory the output goes to a CUDA region (output_out)"));
  }
  params.on_device = true;
  AttentionOutputs outputs;
  outputs.device_scores = reinterpret_cast<float*>(scores_address);
  outputs.device_scores_bytes = request.scores_out().byte_size();
  if (request.has_v()) {
    outputs.device_output = reinterpret_cast<float*>(output_address);
    outputs.device_output_bytes = request.output_out().byte_size();
  }
  ROPE_RETURN_IF_ERROR(engine.AttentionScores(params, &outputs));
  v1::Tensor* scores = reply->mutable_scores();
  scores->set_dtype(v1::FLOAT32);
  scores->mutable_shape()->Assign(outputs.scores_shape.begin(), outputs.scores_shape.end());
  *scores->mutable_shm() = request.scores_out();
  if (request.has_v()) {
    v1::Tensor* output = reply->mutable_output();
    output->set_dtype(v1::FLOAT32);
    output->mutable_shape()->Assign(outputs.output_shape.begin(), outputs.output_shape.end());
    *output->mutable_shm() = request.output_out();
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status AnswerAttentionScoresShared(Engine& engine, const ShmRegistry& registry,
                                         const std::string& owner,
                                         const v1::AttentionScoresRequest& request,
                                         v1::AttentionScoresResponse* reply,
                                         const Interrupt* interrupt) {
  ROPE_RETURN_IF_ERROR(NotBoth(request.q(), "q"));
  ROPE_RETURN_IF_ERROR(NotBoth(request.k(), "k"));
  ROPE_RETURN_IF_ERROR(NotBoth(request.v(), "v"));
  if (request.has_output_out() && !request.has_v()) {
    return absl::InvalidArgumentError("output_out is set but v is missing (no output to write)");
  }
  ROPE_ASSIGN_OR_RETURN(AttentionParams params, AttentionParamsFromProto(request));
  params.interrupt = interrupt;
  ShmCallScope scope(registry, owner);
  const std::pair<const v1::Tensor*, ConstTensorView*> inputs[] = {
      {&request.q(), &params.q}, {&request.k(), &params.k}, {&request.v(), &params.v}};
  const char* names[] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i) {
    const v1::Tensor& tensor = *inputs[i].first;
    if (!tensor.has_shm()) continue;
    ConstTensorView& view = *inputs[i].second;
    ROPE_ASSIGN_OR_RETURN(char* address,
                          scope.Resolve(tensor.shm(), absl::StrCat(names[i], ".shm"),
                                        DTypeSize(view.dtype), false, i));
    view.data = address;
    view.byte_size = tensor.shm().byte_size();
  }
  char* scores_address = nullptr;
  char* output_address = nullptr;
  if (request.has_scores_out()) {
    ROPE_ASSIGN_OR_RETURN(scores_address,
                          scope.Resolve(request.scores_out(), "scores_out", 4, true, kScores));
  }
  if (request.has_output_out()) {
    ROPE_ASSIGN_OR_RETURN(output_address,
                          scope.Resolve(request.output_out(), "output_out", 4, true, kOutput));
  }
  ROPE_RETURN_IF_ERROR(scope.CheckOverlaps());
  const std::string device_field = scope.FirstIn(/*device=*/true);
  if (!device_field.empty()) {
    return AttentionOnDevice(engine, scope, device_field, request, params, scores_address,
                             output_address, reply);
  }

  AttentionOutputs outputs;
  outputs.scores = reply->mutable_scores()->mutable_data();
  if (request.has_v()) outputs.output = reply->mutable_output()->mutable_data();
  ROPE_RETURN_IF_ERROR(engine.AttentionScores(params, &outputs));
  // The engine writes into strings; a reference costs one more copy here
  // (the scores are compute-bound, not bandwidth-bound).
  const std::tuple<char*, const v1::SharedMemoryRef*, v1::Tensor*, std::vector<int64_t>*,
                   const char*>
      results[] = {{scores_address, &request.scores_out(), reply->mutable_scores(),
                    &outputs.scores_shape, "scores_out"},
                   {output_address, &request.output_out(), reply->mutable_output(),
                    &outputs.output_shape, "output_out"}};
  for (const auto& [address, ref, tensor, shape, field] : results) {
    if (address == nullptr) continue;
    if (ref->byte_size() != tensor->data().size()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".byte_size is ", ref->byte_size(),
                                                     ": the result is ", tensor->data().size(),
                                                     " bytes"));
    }
  }
  for (const auto& [address, ref, tensor, shape, field] : results) {
    if (address == nullptr) continue;
    std::memcpy(address, tensor->data().data(), tensor->data().size());
    tensor->clear_data();
    *tensor->mutable_shm() = *ref;
  }
  ROPE_RETURN_IF_ERROR(scope.CheckAfter());
  reply->mutable_scores()->set_dtype(v1::FLOAT32);
  reply->mutable_scores()->mutable_shape()->Assign(outputs.scores_shape.begin(),
                                                   outputs.scores_shape.end());
  if (request.has_v()) {
    reply->mutable_output()->set_dtype(v1::FLOAT32);
    reply->mutable_output()->mutable_shape()->Assign(outputs.output_shape.begin(),
                                                     outputs.output_shape.end());
  }
  return absl::OkStatus();
}

absl::Status AnswerRegisterSharedMemory(Engine& engine, ShmRegistry& registry,
                                        const std::string& owner,
                                        const v1::RegisterSharedMemoryRequest& request) {
  if (request.cuda_ipc_handle().empty()) {
    if (request.cuda_device() != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cuda_device is ", request.cuda_device(),
          " but cuda_ipc_handle is empty: cuda_device only goes with a CUDA region"));
    }
    return registry.Register(owner, request.name(), request.key(), request.offset(),
                             request.byte_size());
  }
  if (!request.key().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key is \"", request.key(),
        "\" and cuda_ipc_handle is set: a region is a shared-memory object or CUDA memory, "
        "not both"));
  }
  if (request.offset() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "offset is ", request.offset(),
        " and cuda_ipc_handle is set: a CUDA region starts at its allocation's first byte "
        "(references carry the offsets)"));
  }
  if (request.cuda_ipc_handle().size() != kCudaIpcHandleBytes) {
    return absl::InvalidArgumentError(absl::StrCat("cuda_ipc_handle is ",
                                                   request.cuda_ipc_handle().size(),
                                                   " bytes: a cudaIpcMemHandle_t is ",
                                                   kCudaIpcHandleBytes));
  }
  if (request.cuda_device() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda_device is ", request.cuda_device(), ": must be >= 0"));
  }
  return registry.RegisterDevice(owner, request.name(), request.byte_size(), [&] {
    return engine.OpenCudaIpcMemory(request.cuda_ipc_handle(), request.cuda_device(),
                                    request.byte_size());
  });
}

absl::Status AnswerUnregisterSharedMemory(ShmRegistry& registry, const std::string& owner,
                                          const v1::UnregisterSharedMemoryRequest& request) {
  return registry.Unregister(owner, request.name());
}

absl::Status AnswerSharedMemoryStatus(const ShmRegistry& registry, const std::string& owner,
                                      const v1::SharedMemoryStatusRequest& request,
                                      v1::SharedMemoryStatusResponse* reply) {
  ROPE_ASSIGN_OR_RETURN(std::vector<ShmRegionInfo> regions, registry.Status(owner, request.name()));
  for (const ShmRegionInfo& info : regions) {
    v1::SharedMemoryRegionStatus* status = reply->add_regions();
    status->set_name(info.name);
    status->set_key(info.key);
    status->set_offset(info.offset);
    status->set_byte_size(info.byte_size);
    status->set_cuda_ipc(info.cuda_ipc);
    status->set_cuda_device(info.cuda_device);
  }
  return absl::OkStatus();
}

}  // namespace rope
