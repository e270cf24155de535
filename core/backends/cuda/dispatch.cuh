// Turns runtime choices into template parameters once, at the launcher
// (flashinfer's DISPATCH_* idea): the body sees `Tag` / a constexpr bool.
#ifndef ROPE_BACKENDS_CUDA_DISPATCH_CUH_
#define ROPE_BACKENDS_CUDA_DISPATCH_CUH_

#include "core/backends/cuda/kernel_common.h"
#include "core/engine/rope_math.h"

// Runs __VA_ARGS__ with `Tag` the math:: storage tag of `storage`.
#define ROPE_DISPATCH_STORAGE(storage, Tag, ...)    \
  switch (storage) {                                \
    case ::rope::kernels::Storage::kFloat32: {      \
      using Tag = ::rope::math::F32;                \
      __VA_ARGS__                                   \
      break;                                        \
    }                                               \
    case ::rope::kernels::Storage::kFloat16: {      \
      using Tag = ::rope::math::F16;                \
      __VA_ARGS__                                   \
      break;                                        \
    }                                               \
    case ::rope::kernels::Storage::kBFloat16: {     \
      using Tag = ::rope::math::BF16;               \
      __VA_ARGS__                                   \
      break;                                        \
    }                                               \
  }

// Runs __VA_ARGS__ with `kName` a constexpr bool equal to `value`.
#define ROPE_DISPATCH_BOOL(value, kName, ...) \
  if (value) {                                \
    constexpr bool kName = true;              \
    __VA_ARGS__                               \
  } else {                                    \
    constexpr bool kName = false;             \
    __VA_ARGS__                               \
  }

#endif  // ROPE_BACKENDS_CUDA_DISPATCH_CUH_
