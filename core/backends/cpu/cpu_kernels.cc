// Compiles the SIMD kernels once per Highway target (hwy/foreach_target.h
// includes this file again for each) and exports one CpuKernels table per
// target. Compiled with -ffp-contract=off (server/CMakeLists.txt): the
// AVX2 and AVX-512 targets have FMA, and a contracted multiply-add would
// round differently from the other targets and from the CUDA kernels.

// Targets: x86 AVX-512 (Highway's AVX3), AVX2, SSE4 and Highway's portable
// fallback (baseline x86-64, i.e. SSE2); Arm NEON/SVE where built there.
// The AVX3 target also gives the avx512_bf16 path (GetExtendedKernels):
// the same kernels but bfloat16 rotations, for CPUs with AVX-512 BF16.
// SSSE3 and AVX3_DL would add nothing these kernels use, only build time.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_AVX3_DL)
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/backends/cpu/cpu_kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <vector>

#include "hwy/highway.h"
#include "core/backends/cpu/cpu_kernels.h"
#include "core/backends/cpu/rotate_simd-inl.h"
#include "core/backends/cpu/softmax_simd-inl.h"
#include "core/backends/cpu/attention_tile_simd-inl.h"
#include "core/backends/cpu/rotated_logits_simd-inl.h"

#ifndef ROPE_BACKENDS_CPU_CPU_KERNELS_CC_ONCE_
#define ROPE_BACKENDS_CPU_CPU_KERNELS_CC_ONCE_
namespace rope {
namespace cpu {

// The name a path goes by in flags, logs and GetServerInfo.
constexpr const char* PathName(int64_t target) {
  switch (target) {
    case HWY_AVX3_DL: return "avx512_dl";
    case HWY_AVX3: return "avx512";  // and "avx512_bf16" (kBf16Kernels)
    case HWY_AVX2: return "avx2";
    case HWY_SSE4: return "sse4";
    case HWY_SSSE3: return "ssse3";
    case HWY_NEON: return "neon";
    case HWY_SVE: return "sve";
    case HWY_SVE2: return "sve2";
    case HWY_SVE_256: return "sve_256";
    case HWY_SVE2_128: return "sve2_128";
    // Highway's portable fallbacks (SCALAR where the compiler is GCC < 12.3,
    // whose EMU128 code Highway does not trust). On x86-64 they are compiled
    // for the baseline instruction set, SSE2, which the compiler vectorises
    // their loops with: hence the name.
    case HWY_EMU128: return HWY_ARCH_X86 ? "sse2" : "emu128";
    case HWY_SCALAR: return HWY_ARCH_X86 ? "sse2" : "scalar";
    default: return "other";
  }
}

// Compiled for the baseline (outside any target's namespace): safe to ask
// on every CPU.
inline bool CpuHasAvx512Bf16() {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

}  // namespace cpu
}  // namespace rope
#endif  // ROPE_BACKENDS_CPU_CPU_KERNELS_CC_ONCE_

HWY_BEFORE_NAMESPACE();
namespace rope {
namespace cpu {
namespace HWY_NAMESPACE {

constexpr CpuKernels kKernels = {PathName(HWY_TARGET), HWY_TARGET, nullptr,     &Rotate,
                                 &RotateCopy,          &Widen,      &Narrow,     &ExpRow,
                                 &ScaleRow,            &StoreRow,   &StreamFence, &RowMax,
                                 &ExpSumRow,           &SoftcapRow, &AlibiRow,   &AddRow,
                                 &SkinnyLogits,        &SkinnyValues, &SkinnyRotatedLogits};

#if ROPE_HAS_BF16_NARROWING
// avx512 plus AVX-512 BF16's bfloat16 narrowing in rotations.
constexpr CpuKernels kBf16Kernels = {"avx512_bf16", HWY_TARGET,  &CpuHasAvx512Bf16,
                                     &RotateWithBf16Instructions, &RotateCopy,
                                     &Widen,        &Narrow,      &ExpRow,
                                     &ScaleRow,     &StoreRow,    &StreamFence,
                                     &RowMax,       &ExpSumRow,   &SoftcapRow,
                                     &AlibiRow,     &AddRow,      &SkinnyLogits,
                                     &SkinnyValues, &SkinnyRotatedLogits};
#endif

}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace rope
HWY_AFTER_NAMESPACE();

// Outside HWY_BEFORE_NAMESPACE: compiled for the baseline, so that asking a
// target for its table is safe on a CPU that cannot run the target.
namespace rope {
namespace cpu {
namespace HWY_NAMESPACE {
const CpuKernels* GetKernels() { return &kKernels; }
// A second path compiled for this target, or null.
const CpuKernels* GetExtendedKernels() {
#if ROPE_HAS_BF16_NARROWING
  return &kBf16Kernels;
#else
  return nullptr;
#endif
}
}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace rope

#if HWY_ONCE
namespace rope {
namespace cpu {

HWY_EXPORT(GetKernels);
HWY_EXPORT(GetExtendedKernels);

namespace {

// Adds every kernel table the entries of one HWY_EXPORT table return.
template <class Table>
void AddPaths(const Table& table, int64_t supported_targets, std::vector<CompiledKernels>* paths) {
  // With more than one target, entry 0 is Highway's chooser and the others
  // are the targets (null where not compiled).
  const size_t entries = sizeof(table) / sizeof(table[0]);
  for (size_t i = entries > 1 ? 1 : 0; i < entries; ++i) {
    if (table[i] == nullptr) continue;
    const CpuKernels* kernels = table[i]();
    if (kernels == nullptr) continue;
    const bool seen = std::any_of(paths->begin(), paths->end(), [&](const CompiledKernels& c) {
      return c.kernels == kernels;
    });
    if (seen) continue;
    const bool supported = (supported_targets & kernels->hwy_target) != 0 &&
                           (kernels->cpu_has_extensions == nullptr || kernels->cpu_has_extensions());
    paths->push_back({kernels, supported});
  }
}

}  // namespace

const std::vector<CompiledKernels>& AllCompiledKernels() {
  static const std::vector<CompiledKernels>* const all = [] {
    auto* paths = new std::vector<CompiledKernels>;
    const int64_t supported = hwy::SupportedTargets();
    AddPaths(HWY_DISPATCH_TABLE(GetKernels), supported, paths);
    AddPaths(HWY_DISPATCH_TABLE(GetExtendedKernels), supported, paths);
    // Highway numbers better targets with lower bits; of one target's paths,
    // the one with extensions is the better.
    std::sort(paths->begin(), paths->end(), [](const CompiledKernels& a, const CompiledKernels& b) {
      if (a.kernels->hwy_target != b.kernels->hwy_target) {
        return a.kernels->hwy_target < b.kernels->hwy_target;
      }
      return a.kernels->cpu_has_extensions != nullptr && b.kernels->cpu_has_extensions == nullptr;
    });
    return paths;
  }();
  return *all;
}

const CpuKernels& BestCpuKernels() {
  for (const CompiledKernels& c : AllCompiledKernels()) {
    if (c.supported) return *c.kernels;
  }
  return *HWY_DYNAMIC_DISPATCH(GetKernels)();  // unreachable: the baseline runs everywhere
}

}  // namespace cpu
}  // namespace rope
#endif  // HWY_ONCE
