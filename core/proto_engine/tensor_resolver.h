// TensorResolver: one call's tensors, resolved once into engine views.
//
// A tensor comes inline (bytes in the message), from a host shared-memory
// region or from a CUDA IPC region (Tensor.shm and the requests' *_out
// references); whichever, it becomes a TensorView tagged with where its
// bytes are (host memory, or a device and its ordinal), the way Triton's
// shared-memory manager turns a reference into (address, memory type,
// device). The engine and the backends see only views.
//
// The reference checks are the resolver's pre-conditions, each naming the
// field, all before any work: the region is the caller's (NOT_FOUND);
// byte_size > 0 and offset + byte_size within the region without overflow
// (INVALID_ARGUMENT); the address aligned to the dtype's size
// (INVALID_ARGUMENT); the backing object still covers the region, by fstat
// (FAILED_PRECONDITION); an output overlaps no other output and no input
// except exactly its own (in place) (INVALID_ARGUMENT); and every tensor of
// the call is in one memory: a CUDA region does not mix with bytes or host
// regions (INVALID_ARGUMENT). Its post-condition (CheckAfter): a region
// whose backing object shrank during the call (the SIGBUS guard,
// shm_fault_guard.h) turns the call's answer into FAILED_PRECONDITION. On
// an error after the checks an output range's contents are unspecified.
//
// The calls say which tensors a request has (core/proto_engine/
// rope_calls.cc, one table per RPC); the resolver knows nothing of any RPC.
// A call holds a lease on every region it resolved until the resolver goes.
//
// Not thread-safe: one per call.
#ifndef ROPE_PROTO_ENGINE_TENSOR_RESOLVER_H_
#define ROPE_PROTO_ENGINE_TENSOR_RESOLVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/engine/dtype.h"
#include "core/engine/tensor.h"
#include "core/proto_engine/shm_registry.h"
#include "rope/v1/rope.pb.h"

namespace rope {

// The caller's shared-memory regions. No registry: shared memory is off,
// and a reference is refused (FAILED_PRECONDITION). `owner` gives the
// caller's identity (the service derives it: caller_identity.h); it is
// asked at most once, at the call's first reference, as deriving it is
// not free.
struct CallerRegions {
  const ShmRegistry* registry = nullptr;
  std::function<std::string()> owner;
};

class TensorResolver {
 public:
  explicit TensorResolver(const CallerRegions& regions);
  TensorResolver(const TensorResolver&) = delete;
  TensorResolver& operator=(const TensorResolver&) = delete;

  // The form of one tensor of the message: INVALID_ARGUMENT naming `name`
  // when it carries both data and shm.
  static absl::Status CheckForm(const v1::Tensor& tensor, absl::string_view name);

  // An input. `view` holds `tensor`'s dtype and shape (from the message);
  // with `tensor.shm` it now points at the referenced bytes, in the
  // region's memory; without, it keeps the message's own bytes (host
  // memory) and `name` counts as inline for CheckCall. `group` ties an
  // input to its outputs: only within a group may ranges coincide. `name`
  // must outlive the resolver (the calls' tables hold literals).
  absl::Status ResolveInput(const v1::Tensor& tensor, absl::string_view name, int group,
                            TensorView* view);
  absl::Status ResolveInput(const v1::Tensor& tensor, absl::string_view name, int group,
                            ConstTensorView* view);

  // An output reference `ref` (field `field`, e.g. "q_out") of `dtype`
  // elements into `view`. With `expected_bytes` >= 0 (known before the
  // work), a byte_size other than it is INVALID_ARGUMENT naming `what`
  // ("q is"), before the region is looked up; otherwise the engine checks
  // the size against the result's shape.
  absl::Status ResolveOutput(const v1::SharedMemoryRef& ref, absl::string_view field, int group,
                             DType dtype, int64_t expected_bytes, absl::string_view what,
                             TensorView* view);

  // The input `name`, resolved by reference, is written too (rotated in
  // place in its region).
  void AlsoWritten(absl::string_view name);

  // The pre-conditions over the whole call, once every tensor is resolved:
  // the overlaps, then one memory for every tensor (inputs that came inline
  // are host memory).
  absl::Status CheckCall() const;

  // Whether the call's tensors are in device memory (CUDA regions), and the
  // first such reference as "q.shm (region \"dev\")" (empty when none).
  bool on_device() const { return !first_device_.empty(); }
  const std::string& first_device_field() const { return first_device_; }

  // The post-condition, after the work: FAILED_PRECONDITION naming the
  // region when one's backing object shrank during the call.
  absl::Status CheckAfter() const;

 private:
  struct Range {
    const MappedRegion* region;
    uint64_t begin;
    uint64_t end;
    std::string field;
    bool output;
    int group;
  };
  // ResolveInput for either kind of view.
  template <typename View>
  absl::Status ResolveInputView(const v1::Tensor& tensor, absl::string_view name, int group,
                                View* view);
  // The address of `ref` after every check but the overlaps.
  absl::StatusOr<char*> Resolve(const v1::SharedMemoryRef& ref, absl::string_view field,
                                size_t alignment, bool output, int group);
  const std::string& Owner();

  const CallerRegions& regions_;
  std::string owner_;
  bool owner_known_ = false;
  std::vector<std::shared_ptr<const MappedRegion>> leases_;
  std::vector<Range> ranges_;
  absl::InlinedVector<absl::string_view, 4> inline_inputs_;  // names from the calls' tables
  std::string first_device_;
};

}  // namespace rope

#endif  // ROPE_PROTO_ENGINE_TENSOR_RESOLVER_H_
