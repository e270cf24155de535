#include "core/engine/dtype.h"

namespace rope {

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat8E4M3: return "float8_e4m3fn";
    case DType::kFloat8E5M2: return "float8_e5m2";
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
