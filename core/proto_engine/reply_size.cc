#include "core/proto_engine/reply_size.h"

#include <algorithm>
#include <cstdint>
#include <limits>

namespace rope {

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// a * b, saturating; negative operands count as 0.
int64_t Mul(int64_t a, int64_t b) {
  if (a <= 0 || b <= 0) return 0;
  return a > kMax / b ? kMax : a * b;
}

int64_t Add(int64_t a, int64_t b) { return a > kMax - b ? kMax : a + b; }

// Dimension `i` counted from the end (1: last) of a [B, S, H, D] or [S, H, D]
// shape; 1 when missing.
int64_t DimFromEnd(const v1::Tensor& tensor, int i) {
  const int rank = tensor.shape_size();
  return rank >= i ? tensor.shape(rank - i) : 1;
}

int64_t Batch(const v1::Tensor& tensor) {
  return tensor.shape_size() >= 4 ? tensor.shape(tensor.shape_size() - 4) : 1;
}

// Whether `tensor`'s shape matches its bytes: shapes that do not are refused
// by validation, and must not be mistaken for a huge reply (which would turn
// INVALID_ARGUMENT into RESOURCE_EXHAUSTED).
int64_t Elements(const v1::Tensor& tensor) {
  int64_t elements = 1;
  for (int64_t dim : tensor.shape()) elements = Mul(elements, dim);
  return elements;
}

// A tensor sent by shared-memory reference (Tensor.shm) has no data bytes:
// its reference's byte_size stands for them.
bool ShapeMatchesData(const v1::Tensor& tensor) {
  const int64_t elements = Elements(tensor);
  const int64_t element_bytes = tensor.dtype() == v1::FLOAT32 ? 4 : 2;
  const uint64_t bytes = tensor.has_shm() ? tensor.shm().byte_size() : tensor.data().size();
  return tensor.shape_size() > 0 && bytes <= static_cast<uint64_t>(kMax) &&
         Mul(elements, element_bytes) == static_cast<int64_t>(bytes);
}

}  // namespace

int64_t RotateReplyBytes(const v1::RotateRequest& request) {
  return Add(static_cast<int64_t>(request.q().data().size()),
             static_cast<int64_t>(request.k().data().size()));
}

int64_t AttentionScoresReplyBytes(const v1::AttentionScoresRequest& request) {
  if (!ShapeMatchesData(request.q()) || !ShapeMatchesData(request.k())) return 0;
  const int64_t batch = Batch(request.q());
  const int64_t seq_q = DimFromEnd(request.q(), 3);
  const int64_t heads_q = DimFromEnd(request.q(), 2);
  const int64_t seq_k = DimFromEnd(request.k(), 3);
  int64_t bytes = Mul(Mul(Mul(Mul(batch, heads_q), seq_q), seq_k), sizeof(float));
  // The engine's float32 working copies of q and k (rotated).
  bytes = Add(bytes, Mul(Add(Elements(request.q()), Elements(request.k())), sizeof(float)));
  if (request.has_v() && ShapeMatchesData(request.v())) {
    const int64_t dim_v = DimFromEnd(request.v(), 1);
    bytes = Add(bytes, Mul(Mul(Mul(Mul(batch, seq_q), heads_q), dim_v), sizeof(float)));
  }
  // A NoPE layer with temperature tuning (config.no_rope, or a layer
  // hf_layer_index picks) scales a copy of q in its own dtype.
  if (request.config().has_no_rope() || request.config().has_hf_layer_index()) {
    const int64_t element = request.q().dtype() == v1::FLOAT32 ? 4 : 2;
    bytes = Add(bytes, Mul(Elements(request.q()), element));
  }
  return bytes;
}

int64_t GetTableReplyBytes(const v1::GetTableRequest& request, int64_t max_len_cap,
                           int64_t max_reply_bytes) {
  const v1::RopeConfig& config = request.config();
  const int64_t max_len = config.max_len() != 0 ? config.max_len() : max_len_cap;
  const int64_t rows = request.count() > 0 ? request.count() : max_len - request.start();
  const int64_t dim = config.rotary_dim() != 0 ? config.rotary_dim()
                      : config.head_dim() != 0 ? config.head_dim()
                                               : 256;
  // cos and sin: rows x dim/2 floats each.
  const int64_t bytes = Mul(Mul(rows, dim), sizeof(float));
  return max_reply_bytes > 0 ? std::min(bytes, max_reply_bytes) : bytes;
}

}  // namespace rope
