// Pieces shared by the CUDA kernel bodies: the storage-type code the
// launchers dispatch on, 16-byte vector loads/stores, and the grid-stride
// loop. Framework-free and compilable by a plain C++ compiler (the bodies are
// tested on the host by running them over the whole launch grid), so nothing
// here may use CUDA-only syntax outside `#if defined(__CUDA_ARCH__)`.
#ifndef ROPE_BACKENDS_CUDA_KERNEL_COMMON_H_
#define ROPE_BACKENDS_CUDA_KERNEL_COMMON_H_

#include <cstdint>
#include <cstring>

#include "core/engine/rope_math.h"

// `#pragma unroll` in nvcc's device pass only (the host compiler would warn
// about an unknown pragma).
#if defined(__CUDA_ARCH__)
#define ROPE_UNROLL _Pragma("unroll")
#else
#define ROPE_UNROLL
#endif

namespace rope {
namespace kernels {

// Storage type of a tensor as the kernels see it (the engine's DType lives
// beside absl types; the backend converts).
enum class Storage : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

inline int StorageBytes(Storage s) { return s == Storage::kFloat32 ? 4 : 2; }

// Elements of storage type S in one 16-byte access.
template <typename Tag>
struct Vec16 {
  using S = typename Tag::Storage;
  static constexpr int kElems = 16 / static_cast<int>(sizeof(S));
  struct alignas(16) Pack {
    S v[kElems];
  };
};

// Loads kN consecutive elements starting at p (16-byte aligned when kVector)
// and widens them to float. kVector: one 16-byte access (kN * sizeof(S) must
// be 16); otherwise kN element accesses.
template <typename Tag, int kN, bool kVector>
ROPE_HOST_DEVICE void LoadFloats(const typename Tag::Storage* p, float* out) {
  using S = typename Tag::Storage;
  if constexpr (kVector) {
    static_assert(kN * sizeof(S) == 16, "a vector access is 16 bytes");
    typename Vec16<Tag>::Pack pack;
#if defined(__CUDA_ARCH__)
    pack = *reinterpret_cast<const typename Vec16<Tag>::Pack*>(p);
#else
    memcpy(&pack, p, sizeof(pack));
#endif
    ROPE_UNROLL
    for (int j = 0; j < kN; ++j) out[j] = math::Load<Tag>(&pack.v[j]);
  } else {
    ROPE_UNROLL
    for (int j = 0; j < kN; ++j) out[j] = math::Load<Tag>(p + j);
  }
}

// Narrows kN floats to storage (round to nearest even) and stores them at p.
template <typename Tag, int kN, bool kVector>
ROPE_HOST_DEVICE void StoreFloats(typename Tag::Storage* p, const float* in) {
  using S = typename Tag::Storage;
  if constexpr (kVector) {
    static_assert(kN * sizeof(S) == 16, "a vector access is 16 bytes");
    typename Vec16<Tag>::Pack pack;
    ROPE_UNROLL
    for (int j = 0; j < kN; ++j) math::Store<Tag>(&pack.v[j], in[j]);
#if defined(__CUDA_ARCH__)
    *reinterpret_cast<typename Vec16<Tag>::Pack*>(p) = pack;
#else
    memcpy(p, &pack, sizeof(pack));
#endif
  } else {
    ROPE_UNROLL
    for (int j = 0; j < kN; ++j) math::Store<Tag>(p + j, in[j]);
  }
}

// A read-only table value; through the read-only data cache on the device.
ROPE_HOST_DEVICE float LoadTable(const float* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(p);
#else
  return *p;
#endif
}

// a / b for non-negative indices: 32-bit division when both fit (several
// times cheaper on a GPU than 64-bit, and uniform across a launch, so no
// divergence), 64-bit otherwise.
ROPE_HOST_DEVICE int64_t IndexDiv(int64_t a, int64_t b) {
  if ((static_cast<uint64_t>(a) | static_cast<uint64_t>(b)) <= 0xffffffffu) {
    return static_cast<int64_t>(static_cast<uint32_t>(a) / static_cast<uint32_t>(b));
  }
  return a / b;
}

// The grid-stride loop every kernel body runs: thread `thread` of block
// `block` (of `block_dim` threads, in a grid of `grid_dim` blocks) handles
// items block * block_dim + thread, then every grid_dim * block_dim after it.
template <typename F>
ROPE_HOST_DEVICE void GridStride(int64_t items, int64_t block, int thread, int block_dim,
                                 int64_t grid_dim, F&& f) {
  const int64_t step = grid_dim * block_dim;
  for (int64_t item = block * block_dim + thread; item < items; item += step) f(item);
}

// Blocks for `items` items of `block_dim` threads each, capped at
// `max_blocks` (the grid-stride loop covers the rest). At least 1.
inline int64_t BlocksFor(int64_t items, int block_dim, int64_t max_blocks) {
  int64_t blocks = (items + block_dim - 1) / block_dim;
  if (blocks > max_blocks) blocks = max_blocks;
  return blocks < 1 ? 1 : blocks;
}

}  // namespace kernels
}  // namespace rope

#endif  // ROPE_BACKENDS_CUDA_KERNEL_COMMON_H_
