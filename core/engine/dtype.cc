#include "core/engine/dtype.h"

namespace rope {

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
  }
  return "unknown";
}

absl::string_view LayoutName(Layout layout) {
  switch (layout) {
    case Layout::kInterleaved: return "interleaved";
    case Layout::kHalf: return "half";
  }
  return "unknown";
}

}  // namespace rope
