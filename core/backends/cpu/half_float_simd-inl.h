// float16 / bfloat16 <-> float32 on Highway vectors, bit-identical on every
// target to the scalar conversions of rope_math.h (round to nearest even;
// see cpu_kernels.h for NaNs). Included once per target by cpu_kernels.cc.
//
// Written here rather than taken from Highway 1.0's PromoteTo/DemoteTo: its
// bfloat16 demotion truncates, and its float16 emulation (targets without
// F16C) truncates and mishandles infinities and NaNs. Only F16C (x86 AVX2 and
// AVX-512 targets) is used as is.
//
// Two shapes of access, both little-endian:
//  - ordered: N consecutive 16-bit elements <-> one float vector of N lanes;
//  - split: 2N consecutive elements <-> two float vectors, `even` holding
//    elements 0, 2, 4, ... and `odd` elements 1, 3, 5, ... This costs two
//    integer operations per 2N elements for bfloat16, and gives the pairs of
//    the interleaved layout without any shuffle.

// Per-target include guard (Highway's multiple-inclusion idiom).
#if defined(ROPE_BACKENDS_CPU_HALF_FLOAT_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ROPE_BACKENDS_CPU_HALF_FLOAT_SIMD_INL_H_
#undef ROPE_BACKENDS_CPU_HALF_FLOAT_SIMD_INL_H_
#else
#define ROPE_BACKENDS_CPU_HALF_FLOAT_SIMD_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace rope {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// F16C converts float16 exactly and rounds to nearest even; Highway's AVX2
// and AVX-512 targets require it.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
constexpr bool kNativeF16 = true;
#else
constexpr bool kNativeF16 = false;
#endif

// The split access needs two 16-bit elements per float lane, which HWY_SCALAR
// (one-lane vectors; Highway's fallback when the compiler is GCC < 12.3,
// whose EMU128 code it does not trust) cannot express.
constexpr bool kCanSplit = HWY_TARGET != HWY_SCALAR;

template <class DF>
using VecU32 = hn::Vec<hn::RebindToUnsigned<DF>>;

// ---- bfloat16 ------------------------------------------------------------------

// Float bits rounded to nearest even at bit 16: the bfloat16 result is the
// high half. Not for NaN lanes (their rounding may carry into the exponent).
template <class DF>
HWY_INLINE VecU32<DF> Bf16RoundFinite(DF df, hn::Vec<DF> v) {
  const hn::RebindToUnsigned<DF> du;
  const auto u = hn::BitCast(du, v);
  const auto lsb = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
  return hn::Add(u, hn::Add(lsb, hn::Set(du, 0x7fffu)));
}

// As Bf16RoundFinite, and a NaN keeps its high half with the quiet bit set.
template <class DF>
HWY_INLINE VecU32<DF> Bf16Round(DF df, hn::Vec<DF> v) {
  const hn::RebindToUnsigned<DF> du;
  const auto quiet = hn::Or(hn::BitCast(du, v), hn::Set(du, 0x00400000u));
  return hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), quiet, Bf16RoundFinite(df, v));
}

// ---- float16 without F16C --------------------------------------------------------

// `h` holds a float16 in the low 16 bits of each lane (high bits zero).
template <class DF>
HWY_INLINE hn::Vec<DF> F16BitsToFloat(DF df, VecU32<DF> h) {
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const auto sign = hn::ShiftLeft<16>(hn::And(h, hn::Set(du, 0x8000u)));
  const auto exp = hn::And(hn::ShiftRight<10>(h), hn::Set(du, 0x1fu));
  const auto mant = hn::And(h, hn::Set(du, 0x3ffu));
  const auto normal =
      hn::Or(hn::ShiftLeft<23>(hn::Add(exp, hn::Set(du, 112u))), hn::ShiftLeft<13>(mant));
  // Infinity, or a NaN made quiet (as F16C does).
  const auto is_nan = hn::RebindMask(du, hn::Ne(hn::BitCast(di, mant), hn::Zero(di)));
  const auto inf_nan = hn::Or(hn::Or(hn::Set(du, 0x7f800000u), hn::ShiftLeft<13>(mant)),
                              hn::IfThenElseZero(is_nan, hn::Set(du, 0x00400000u)));
  // Subnormal (or zero): mant * 2^-24, exact in float.
  const auto subnormal = hn::BitCast(
      du, hn::Mul(hn::ConvertTo(df, hn::BitCast(di, mant)), hn::Set(df, 5.9604644775390625e-8f)));
  auto bits = hn::IfThenElse(hn::RebindMask(du, hn::Eq(exp, hn::Zero(du))), subnormal, normal);
  bits = hn::IfThenElse(hn::RebindMask(du, hn::Eq(exp, hn::Set(du, 0x1fu))), inf_nan, bits);
  return hn::BitCast(df, hn::Or(bits, sign));
}

// The float16 of each lane, in its low 16 bits (high bits zero): the
// operations of math::FloatToHalf, lane by lane.
template <class DF>
HWY_INLINE VecU32<DF> FloatToF16Bits(DF df, hn::Vec<DF> v) {
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const auto u = hn::BitCast(du, v);
  const auto sign = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 0x8000u));
  const auto abs = hn::And(u, hn::Set(du, 0x7fffffffu));
  const auto abs_i = hn::BitCast(di, abs);  // < 2^31: signed compares are exact
  // Normal: rebias the exponent, round 13 dropped bits to nearest even.
  const auto mant_odd = hn::And(hn::ShiftRight<13>(abs), hn::Set(du, 1u));
  const auto normal =
      hn::ShiftRight<13>(hn::Add(abs, hn::Add(mant_odd, hn::Set(du, 0xc8000fffu))));
  // Subnormal or zero: abs + 0.5 in float rounds abs * 2^24 to an integer.
  const auto subnormal = hn::Sub(hn::BitCast(du, hn::Add(hn::BitCast(df, abs), hn::Set(df, 0.5f))),
                                 hn::Set(du, 0x3f000000u));
  auto bits = hn::IfThenElse(hn::RebindMask(du, hn::Lt(abs_i, hn::Set(di, 0x38800000))), subnormal,
                             normal);
  bits = hn::IfThenElse(hn::RebindMask(du, hn::Gt(abs_i, hn::Set(di, 0x477fefff))),
                        hn::Set(du, 0x7c00u), bits);
  bits = hn::IfThenElse(hn::RebindMask(du, hn::Gt(abs_i, hn::Set(di, 0x7f800000))),
                        hn::Set(du, 0x7e00u), bits);
  return hn::Or(bits, sign);
}

// A NaN lane becomes the NaN whose float16 is sign|0x7e00, so that F16C's
// narrowing (which keeps payloads) matches math::FloatToHalf.
template <class DF>
HWY_INLINE hn::Vec<DF> CanonicalNaN(DF df, hn::Vec<DF> v) {
  const hn::RebindToUnsigned<DF> du;
  const auto canonical = hn::Or(hn::And(hn::BitCast(du, v), hn::Set(du, 0x80000000u)),
                                hn::Set(du, 0x7fc00000u));
  return hn::IfThenElse(hn::IsNaN(v), hn::BitCast(df, canonical), v);
}

// ---- Ordered access: N elements <-> N lanes --------------------------------------

template <class DF>
HWY_INLINE hn::Vec<DF> LoadBf16(DF df, const uint16_t* p) {
  const hn::RebindToUnsigned<DF> du;
  const hn::Rebind<uint16_t, DF> d16;
  return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, p))));
}

template <class DF>
HWY_INLINE void StoreBf16(DF df, hn::Vec<DF> v, uint16_t* p) {
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<uint16_t, DF> d16;
  const auto bits = hn::ShiftRight<16>(Bf16Round(df, v));
  hn::StoreU(hn::DemoteTo(d16, hn::BitCast(di, bits)), d16, p);
}

template <class DF>
HWY_INLINE hn::Vec<DF> LoadF16(DF df, const uint16_t* p) {
  if constexpr (kNativeF16) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
  } else {
    const hn::RebindToUnsigned<DF> du;
    const hn::Rebind<uint16_t, DF> d16;
    return F16BitsToFloat(df, hn::PromoteTo(du, hn::LoadU(d16, p)));
  }
}

template <class DF>
HWY_INLINE void StoreF16(DF df, hn::Vec<DF> v, uint16_t* p) {
  if constexpr (kNativeF16) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    if (HWY_UNLIKELY(!hn::AllFalse(df, hn::IsNaN(v)))) v = CanonicalNaN(df, v);
    hn::StoreU(hn::DemoteTo(dh, v), dh, reinterpret_cast<hwy::float16_t*>(p));
  } else {
    const hn::RebindToSigned<DF> di;
    const hn::Rebind<uint16_t, DF> d16;
    hn::StoreU(hn::DemoteTo(d16, hn::BitCast(di, FloatToF16Bits(df, v))), d16, p);
  }
}

// ---- Split access: 2N elements <-> (even, odd) ------------------------------------

// The 2N elements as one vector, loaded once. Both halves of the split use
// the loaded bits; GCC would fold the load into each of the two operations
// and read the same bytes twice, a cost where they straddle two cache lines
// (tensors sit 16 bytes past a line: glibc's placement of large blocks). The
// empty assembly statement makes the loaded value opaque, so it stays in a
// register. Decode bf16 [32,1,32|8,128] on avx512_bf16: see
// bench/results/cpu_simd_notes.md, "Session 11".
template <class D>
HWY_INLINE hn::Vec<D> LoadSplitSource(D d, const hn::TFromD<D>* p) {
  auto v = hn::LoadU(d, p);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_SSSE3 && defined(__GNUC__)
  asm("" : "+v"(v.raw));
#endif
  return v;
}

template <class DF>
HWY_INLINE void LoadBf16Split(DF df, const uint16_t* p, hn::Vec<DF>& even, hn::Vec<DF>& odd) {
  const hn::RebindToUnsigned<DF> du;
  const hn::Repartition<uint16_t, DF> d16;
  const auto bits = hn::BitCast(du, LoadSplitSource(d16, p));
  even = hn::BitCast(df, hn::ShiftLeft<16>(bits));
  odd = hn::BitCast(df, hn::And(bits, hn::Set(du, 0xffff0000u)));
}

// 1 where StoreBf16Split adds its carry by a mask (AVX-512 BW, with GCC's or
// Clang's inline assembly). Set per target.
#undef ROPE_HAS_MASKED_BF16_CARRY
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3 && defined(__GNUC__)
#define ROPE_HAS_MASKED_BF16_CARRY 1
#else
#define ROPE_HAS_MASKED_BF16_CARRY 0
#endif

#if ROPE_HAS_MASKED_BF16_CARRY
// StoreBf16Split's carry (below) on AVX-512 vectors of 32 words: t plus 1
// exactly where w_odd > 0x8000 as an unsigned word, the condition the
// portable average-and-shift tests, as a compare into a mask and one add
// under it: two operations where the portable form takes three, so seven
// per 32 values instead of eight (GCC already fuses the And and Or of
// w_odd). Decode bf16 [32,1,32|8,128] on the avx512 path:
// bench/results/cpu_simd_notes.md, "Session 13".
//
// The add is done in place by inline assembly: for _mm512_mask_add_epi16(t,
// ...) GCC 12 copies t to another register first, one more instruction per
// 32 values in a loop of about 20 (LLVM's Skylake-SP model: 7.1 -> 6.6
// cycles per block with this and the mask, interleaved decode).
//
// t and w stay a shift and a masked blend each. Two-source word permutes
// (VPERMT2W) would build each in one instruction, and ran 8-10% faster on
// the AMD host measured; but Intel's Skylake-SP, Ice Lake and Sapphire
// Rapids cores decode one into 3 uops, 2 of them on the single 512-bit
// shuffle port (LLVM's scheduling models), and those CPUs without AVX-512
// BF16 are the ones this path serves for bfloat16 in cache (AMD's cores with
// AVX-512 have BF16 and take avx512_bf16).
HWY_INLINE __m512i AddCarryByMask(__m512i t, __m512i w_odd) {
  const __mmask32 round_up = _mm512_cmpgt_epu16_mask(w_odd, _mm512_set1_epi16(-0x8000));
  asm("vpaddw %[one], %[t], %[t]%{%[k]%}"
      : [t] "+v"(t)
      : [one] "v"(_mm512_set1_epi16(1)), [k] "Yk"(round_up));
  return t;
}
#endif

// Stores even/odd as bfloat16, rounded to nearest even. Both vectors round
// at once, in 16-bit lanes: t holds the truncated results (the high halves of
// even's and odd's bits, interleaved as stored), w the dropped low halves;
// rounding adds 1 to t exactly when w + (t & 1) > 0x8000, i.e. when
// AverageRound(w | (t & 1), 0x7ffe) = (w + 0x7fff) >> 1 (computed without
// overflow) has its top bit set. Nine integer operations per 2N values, fewer
// than rounding each 32-bit lane.
//
// NaN lanes must be quiet with a zero low half; they then keep their high
// half (w = 0 cannot round up), as math::FloatToBFloat16 does. Every NaN the
// rotation computes is of that kind, so it needs no NaN test (which cost a
// sixth of the vector operations of a decode-size rotation): IEEE 754 NaN
// results are quiet and carry an input NaN's payload, here a widened
// bfloat16's (low half zero), or are the default NaN (0xffc00000 on x86,
// 0x7fc00000 on Arm); the table's values are finite.
template <class DF>
HWY_INLINE void StoreBf16Split(DF df, hn::Vec<DF> even, hn::Vec<DF> odd, uint16_t* p) {
  const hn::RebindToUnsigned<DF> du;
  const hn::Repartition<uint16_t, DF> d16;
  const auto ue = hn::BitCast(du, even);
  const auto uo = hn::BitCast(du, odd);
  const auto t = hn::OddEven(hn::BitCast(d16, uo), hn::BitCast(d16, hn::ShiftRight<16>(ue)));
  const auto w = hn::OddEven(hn::BitCast(d16, hn::ShiftLeft<16>(uo)), hn::BitCast(d16, ue));
  const auto w_odd = hn::Or(w, hn::And(t, hn::Set(d16, uint16_t{1})));
#if ROPE_HAS_MASKED_BF16_CARRY
  if constexpr (hn::MaxLanes(d16) == 32) {
    hn::StoreU(hn::Vec<decltype(d16)>{AddCarryByMask(t.raw, w_odd.raw)}, d16, p);
    return;
  }
#endif
  const auto carry = hn::ShiftRight<15>(hn::AverageRound(w_odd, hn::Set(d16, uint16_t{0x7ffe})));
  hn::StoreU(hn::Add(t, carry), d16, p);
}

// ---- bfloat16 narrowing by AVX-512 BF16 (the avx512_bf16 path) -----------------

// 1 where this target compiles StoreBf16SplitNative, and with it the
// avx512_bf16 path (rotate_simd-inl.h, cpu_kernels.cc): Highway's AVX3
// target, with GCC's (or Clang's) inline assembly. Set per target.
#undef ROPE_HAS_BF16_NARROWING
#if HWY_TARGET == HWY_AVX3 && defined(__GNUC__)
#define ROPE_HAS_BF16_NARROWING 1
#else
#define ROPE_HAS_BF16_NARROWING 0
#endif

#if ROPE_HAS_BF16_NARROWING
// As StoreBf16Split, by VCVTNE2PS2BF16 (AVX-512 BF16: AMD Zen 4 and later,
// Intel Cooper Lake and Sapphire Rapids and later), which narrows 32 floats
// in one instruction, round to nearest even, and keeps a NaN's top bits with
// the quiet bit set: math::FloatToBFloat16's result for every lane but a
// subnormal one, which it flushes to zero. A block with a subnormal lane
// (rare: only values below 2^-126 in magnitude) takes the integer rounding.
// The caller runs this only where the CPU has AVX-512 BF16 (cpu_kernels.cc).
//
// Inline assembly rather than _mm512_cvtne2ps_pbh: the intrinsic needs the
// avx512bf16 target, which Highway 1.0.3's AVX3 target (Debian 12) does not
// enable, and GCC does not inline a function of a wider target into these
// kernels (a call per 32 values).
template <class DF>
HWY_INLINE void StoreBf16SplitNative(DF df, hn::Vec<DF> even, hn::Vec<DF> odd, uint16_t* p) {
  if constexpr (hn::MaxLanes(DF()) == 16) {
    constexpr int kDenormal = 0x20;  // VFPCLASSPS category
    const __mmask16 subnormal =
        _mm512_fpclass_ps_mask(even.raw, kDenormal) | _mm512_fpclass_ps_mask(odd.raw, kDenormal);
    if (HWY_LIKELY(subnormal == 0)) {
      // Words 0-15: even's lanes, 16-31: odd's (the second source goes low).
      __m512i halves;
      asm("vcvtne2ps2bf16 %[lo], %[hi], %[out]"
          : [out] "=v"(halves)
          : [lo] "v"(even.raw), [hi] "v"(odd.raw));
      // Interleaved as stored: word 2i = even lane i, word 2i + 1 = odd lane i.
      const __m512i interleave =
          _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7,
                           22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
      _mm512_storeu_si512(p, _mm512_permutexvar_epi16(interleave, halves));
      return;
    }
  }
  StoreBf16Split(df, even, odd, p);
}
#endif

template <class DF>
HWY_INLINE void LoadF16Split(DF df, const uint16_t* p, hn::Vec<DF>& even, hn::Vec<DF>& odd) {
  const hn::RebindToUnsigned<DF> du;
  const hn::Repartition<uint16_t, DF> d16;
  const auto bits = hn::BitCast(du, LoadSplitSource(d16, p));
  even = F16BitsToFloat(df, hn::And(bits, hn::Set(du, 0xffffu)));
  odd = F16BitsToFloat(df, hn::ShiftRight<16>(bits));
}

template <class DF>
HWY_INLINE void StoreF16Split(DF df, hn::Vec<DF> even, hn::Vec<DF> odd, uint16_t* p) {
  const hn::Repartition<uint16_t, DF> d16;
  const auto bits =
      hn::Or(FloatToF16Bits(df, even), hn::ShiftLeft<16>(FloatToF16Bits(df, odd)));
  hn::StoreU(hn::BitCast(d16, bits), d16, p);
}

}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace rope
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
