#include "core/engine/tensor.h"

#include "absl/strings/str_cat.h"

namespace rope {

std::string TensorMemory::ToString() const {
  return kind == MemoryKind::kHost ? std::string("host memory")
                                   : absl::StrCat("device ", device, " memory");
}

}  // namespace rope
