#include "core/proto_engine/tensor_resolver.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace rope {

TensorResolver::TensorResolver(const CallerRegions& regions) : regions_(regions) {}

absl::Status TensorResolver::CheckForm(const v1::Tensor& tensor, absl::string_view name) {
  if (tensor.has_shm() && !tensor.data().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(name, " has both data (", tensor.data().size(),
                                                   " bytes) and shm: send one of them"));
  }
  return absl::OkStatus();
}

const std::string& TensorResolver::Owner() {
  if (!owner_known_) {
    owner_ = regions_.owner ? regions_.owner() : std::string();
    owner_known_ = true;
  }
  return owner_;
}

absl::StatusOr<char*> TensorResolver::Resolve(const v1::SharedMemoryRef& ref,
                                              absl::string_view field, size_t alignment,
                                              bool output, int group) {
  if (regions_.registry == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(field, ": shared memory is off on this server"));
  }
  const std::string field_name(field);
  ROPE_ASSIGN_OR_RETURN(std::shared_ptr<const MappedRegion> region,
                        regions_.registry->Find(Owner(), ref.region(), field_name));
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
  if (region->is_device() && first_device_.empty()) {
    first_device_ = absl::StrCat(field, " (region \"", region->name(), "\")");
  }
  ranges_.push_back({region.get(), ref.offset(), ref.offset() + ref.byte_size(), field_name,
                     output, group});
  leases_.push_back(std::move(region));
  return address;
}

template <typename View>
absl::Status TensorResolver::ResolveInputView(const v1::Tensor& tensor, absl::string_view name,
                                              int group, View* view) {
  if (!tensor.has_shm()) {
    inline_inputs_.push_back(name);
    return absl::OkStatus();
  }
  ROPE_ASSIGN_OR_RETURN(char* address, Resolve(tensor.shm(), absl::StrCat(name, ".shm"),
                                                DTypeSize(view->dtype), /*output=*/false, group));
  view->data = address;
  view->byte_size = tensor.shm().byte_size();
  view->memory = ranges_.back().region->memory();
  return absl::OkStatus();
}

absl::Status TensorResolver::ResolveInput(const v1::Tensor& tensor, absl::string_view name,
                                          int group, TensorView* view) {
  return ResolveInputView(tensor, name, group, view);
}

absl::Status TensorResolver::ResolveInput(const v1::Tensor& tensor, absl::string_view name,
                                          int group, ConstTensorView* view) {
  return ResolveInputView(tensor, name, group, view);
}

absl::Status TensorResolver::ResolveOutput(const v1::SharedMemoryRef& ref, absl::string_view field,
                                           int group, DType dtype, int64_t expected_bytes,
                                           absl::string_view what, TensorView* view) {
  if (expected_bytes >= 0 && ref.byte_size() != static_cast<uint64_t>(expected_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".byte_size is ", ref.byte_size(), ": ",
                                                   what, " ", expected_bytes, " bytes"));
  }
  ROPE_ASSIGN_OR_RETURN(char* address,
                        Resolve(ref, field, DTypeSize(dtype), /*output=*/true, group));
  view->dtype = dtype;
  view->data = address;
  view->byte_size = ref.byte_size();
  view->memory = ranges_.back().region->memory();
  return absl::OkStatus();
}

void TensorResolver::AlsoWritten(absl::string_view name) {
  const std::string field = absl::StrCat(name, ".shm");
  for (size_t i = 0, n = ranges_.size(); i < n; ++i) {
    if (ranges_[i].field == field) {
      Range written = ranges_[i];
      written.output = true;
      ranges_.push_back(std::move(written));
      return;
    }
  }
}

absl::Status TensorResolver::CheckCall() const {
  for (size_t i = 0; i < ranges_.size(); ++i) {
    const Range& out = ranges_[i];
    if (!out.output) continue;
    for (size_t j = 0; j < ranges_.size(); ++j) {
      const Range& other = ranges_[j];
      if (i == j || other.region != out.region) continue;
      if (other.end <= out.begin || out.end <= other.begin) continue;
      const bool in_place = !other.output && other.group == out.group &&
                            other.begin == out.begin && other.end == out.end;
      if (in_place) continue;
      if (other.output && other.group == out.group) continue;  // the same output twice
      return absl::InvalidArgumentError(absl::StrCat(
          out.field, " [", out.begin, ", ", out.end, ") overlaps ", other.field, " [",
          other.begin, ", ", other.end, ") in region \"", out.region->name(),
          "\": an output may only equal its own input exactly (in place)"));
    }
  }
  if (!on_device()) return absl::OkStatus();
  // A backend reads the call's tensors where they lie: all on its device,
  // or all on the host. Named: the last inline tensor, else the first host
  // region.
  std::string host_field;
  for (const Range& range : ranges_) {
    if (!range.region->is_device()) {
      host_field = absl::StrCat(range.field, " (region \"", range.region->name(), "\")");
      break;
    }
  }
  if (!inline_inputs_.empty()) host_field = absl::StrCat(inline_inputs_.back(), " (bytes)");
  if (!host_field.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        first_device_, " is CUDA device memory but ", host_field,
        " is not: one call's tensors are all in CUDA regions or none"));
  }
  return absl::OkStatus();
}

absl::Status TensorResolver::CheckAfter() const {
  for (const auto& region : leases_) {
    if (region->Faulted()) return region->Check();
  }
  return absl::OkStatus();
}

}  // namespace rope
