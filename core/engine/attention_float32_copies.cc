#include "core/engine/attention_float32_copies.h"

#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "core/engine/rope_math.h"

namespace rope {
namespace {

template <typename Tag>
void LoadAll(const void* in, int64_t n, float* out) {
  const auto* src = static_cast<const typename Tag::Storage*>(in);
  for (int64_t i = 0; i < n; ++i) out[i] = math::Load<Tag>(src + i);
}

absl::Status ToFloat32(DType dtype, const void* in, int64_t n, float* out) {
  switch (dtype) {
    case DType::kFloat32:
      std::memcpy(out, in, static_cast<size_t>(n) * sizeof(float));
      return absl::OkStatus();
    case DType::kFloat16:
      LoadAll<math::F16>(in, n, out);
      return absl::OkStatus();
    case DType::kBFloat16:
      LoadAll<math::BF16>(in, n, out);
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("attention of ", DTypeName(dtype), " tensors: q, k and v must be "
                       "float32, float16 or bfloat16"));
  }
}

}  // namespace

absl::Status RotateIntoFloat32Copies(Backend& backend, const RopeTable& table,
                                     const math::PositionSpec& q_index,
                                     const math::PositionSpec& k_index, AttentionArgs* args,
                                     AttentionFloat32Copies* copies) {
  if (!args->memory.is_host()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a mask or ALiBi is set with q_fractional_positions / k_fractional_positions: this server "
        "masks such a call (causal, a window, chunks or ALiBi) on float32 copies of q, k and v "
        "in host memory, not with q in ",
        args->memory.ToString(), " (send them in host memory, or no mask)"));
  }
  const int64_t q_n = args->batch * args->q_seq * args->q_heads * args->head_dim;
  const int64_t k_n = args->batch * args->k_seq * args->k_heads * args->head_dim;
  const int64_t v_n = args->v != nullptr ? args->batch * args->k_seq * args->k_heads * args->v_dim
                                         : 0;
  try {
    copies->q.resize(q_n);
    copies->k.resize(k_n);
    copies->v.resize(v_n);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "out of memory copying q, k and v to float32 (", q_n + k_n + v_n,
        " elements) for a mask over fractional positions"));
  }
  ROPE_RETURN_IF_ERROR(ToFloat32(args->dtype, args->q, q_n, copies->q.data()));
  ROPE_RETURN_IF_ERROR(ToFloat32(args->dtype, args->k, k_n, copies->k.data()));
  if (args->v != nullptr) {
    ROPE_RETURN_IF_ERROR(ToFloat32(args->dtype, args->v, v_n, copies->v.data()));
  }

  RotateArgs rotate;
  rotate.dtype = DType::kFloat32;
  rotate.layout = args->layout;
  rotate.batch = args->batch;
  rotate.head_dim = args->head_dim;
  rotate.rotary_dim = args->rotary_dim;
  rotate.rotary_offset = args->rotary_offset;
  rotate.memory = args->memory;
  rotate.seq = args->q_seq;
  rotate.q = copies->q.data();
  rotate.q_heads = args->q_heads;
  rotate.positions = args->q_positions;
  ROPE_RETURN_IF_ERROR(backend.Rotate(table, rotate));
  rotate.seq = args->k_seq;
  rotate.q = copies->k.data();
  rotate.q_heads = args->k_heads;
  rotate.positions = args->k_positions;
  ROPE_RETURN_IF_ERROR(backend.Rotate(table, rotate));

  args->dtype = DType::kFloat32;
  args->q = copies->q.data();
  args->k = copies->k.data();
  if (args->v != nullptr) args->v = copies->v.data();
  args->rotary_dim = 0;
  args->rotary_offset = 0;
  args->q_positions = q_index;
  args->k_positions = k_index;
  return absl::OkStatus();
}

}  // namespace rope
