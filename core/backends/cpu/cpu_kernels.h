// The CPU backend's SIMD kernels: one table of entry points per instruction
// set the build compiled (Google Highway targets, chosen at run time by
// cpu_simd.h), and the plain parameter structs they take: a rotation reads
// the backend's RotateArgs as they are (core/engine/backend_args.h).
//
// Arithmetic contract, the same on every path: float32 math with separate
// multiplies and adds (no FMA contraction: every kernel source is compiled
// with -ffp-contract=off), exactly the operations of math::RotatePair, and
// reductions over 16 fixed lanes whatever the vector width, so that every
// path gives bit-identical results (NaN results: NaN; their sign and payload
// may differ). float16/bfloat16 narrowing rounds to nearest even; a NaN
// becomes sign|0x7e00 (float16) or keeps its top bits with the quiet bit set
// (bfloat16), as math::FloatToHalf / math::FloatToBFloat16 do. Widening is
// exact; a float16 NaN comes out quiet.
//
// Framework-free: no absl, protobuf or gRPC type appears here.
#ifndef ROPE_BACKENDS_CPU_CPU_KERNELS_H_
#define ROPE_BACKENDS_CPU_CPU_KERNELS_H_

#include <cstdint>
#include <vector>

#include "core/engine/backend_args.h"
#include "core/engine/dtype.h"
#include "core/engine/rope_math.h"
#include "core/engine/table_rows.h"

namespace rope {
namespace cpu {

// Float32 rotated copies: head h of token t (t = b * seq + s) is read from
// src + t * src_token_stride + h * head_dim (elements of dtype), widened,
// rotated forward by the row of positions.At(b, s) (every feature copied,
// features rotary_offset .. rotary_offset + rotary_dim - 1 rotated; the
// table is not read when rotary_dim is 0) and written to
// dst + (t - dst_first_token) * dst_token_stride + h * dst_head_stride.
struct RotateCopyParams {
  DType dtype = DType::kFloat32;
  bool interleaved = true;
  const void* src = nullptr;
  int64_t src_token_stride = 0;
  float* dst = nullptr;
  int64_t dst_first_token = 0;
  int64_t dst_token_stride = 0;
  int64_t dst_head_stride = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t rotary_dim = 0;
  int64_t rotary_offset = 0;
  int64_t seq = 1;
  TableRows table;
  math::PositionSpec positions;
};

// The logits of a few query rows (decode) against keys rotated on the fly
// (skinny_rotated_logits): key j's head h is read from
// k + j * k_token_stride + h * head_dim (elements of dtype), widened and
// rotated forward by the table row of positions[j] exactly as rotate_copy
// would (the same bits), and dotted with the rows of every query set of
// head h as skinny_logits does. The rotated key lives in registers (heads
// rotated whole) or a head-sized buffer that stays in L1, never in a key
// tile's rotated copy.
struct SkinnyQuerySet {
  const float* q = nullptr;  // m rows of head_dim rotated floats
  int64_t m = 0;
  int64_t head = 0;          // the key/value head, 0-based from k
  float* s = nullptr;        // s[r * n + j] = scale * (q[r] . rotated key j)
};

struct RotatedKeysParams {
  DType dtype = DType::kFloat32;
  bool interleaved = true;
  const void* k = nullptr;
  int64_t k_token_stride = 0;
  int64_t head_dim = 0;
  int64_t rotary_dim = 0;
  int64_t rotary_offset = 0;
  int64_t n = 0;                       // keys
  const int64_t* positions = nullptr;  // n table positions
  TableRows table;
  float scale = 1.0f;
  // Sets of the same head should be adjacent: a head is rotated again
  // whenever the head changes from one set to the next.
  const SkinnyQuerySet* sets = nullptr;
  int64_t set_count = 0;
  // Bytes [0, prefetch_bytes) from prefetch + j * prefetch_token_stride
  // (bytes) are asked for into the cache while key j is read: the values
  // the products are taken with next, fetched under this arithmetic rather
  // than waited for later. A hint only (null: none).
  const void* prefetch = nullptr;
  int64_t prefetch_token_stride = 0;
  int64_t prefetch_bytes = 0;
};

struct CpuKernels {
  const char* name;    // the path's name, e.g. "avx2" (cpu_simd.h lists them)
  int64_t hwy_target;  // the Highway target bit it was compiled for
  // Whether this CPU has the instructions the path uses beyond its Highway
  // target's (avx512_bf16: AVX-512 BF16); null when it uses none.
  bool (*cpu_has_extensions)();

  // Rotates tokens [begin, end) of args.q (and args.k) in place: token
  // t = b * seq + s of q is q_heads head vectors of head_dim elements at
  // q + t * q_heads * head_dim (likewise k, which may be null), rotated by
  // the row of `table` at positions.At(b, s). Features rotary_offset ..
  // rotary_offset + rotary_dim - 1 rotate, the others are not touched
  // (rotary_dim 0: the table is not read); q_source, k_source and memory are
  // the backend's (host memory). With IsFloat8(args.output_dtype), out of
  // place instead: q and k (q_source and k_source when set) are only read,
  // and each head, times q_scale (k_scale), is rounded into q_out (k_out).
  void (*rotate)(const RotateArgs& args, const TableRows& table, int64_t begin, int64_t end);
  // Tokens [begin, end) of RotateCopyParams.
  void (*rotate_copy)(const RotateCopyParams& p, int64_t begin, int64_t end);

  // n elements of 16-bit storage <-> float32; narrow also takes the float8
  // types (as RotateParams' outputs round: common/float8.h).
  void (*widen)(DType dtype, const void* src, int64_t n, float* dst);
  void (*narrow)(DType dtype, const float* src, int64_t n, void* dst);

  // The softmax of row[0, visible) is exp_row's result times what it
  // returns: it replaces row[j] by exp(row[j] - max) and returns 1 / sum
  // (0 when visible == 0).
  float (*exp_row)(float* row, int64_t visible);
  // row[0, n) *= scale.
  void (*scale_row)(float* row, int64_t n, float scale);

  // out[0, visible) = src[0, visible) * scale, out[visible, n) = fill. With
  // `stream`, streaming stores that bypass the cache where out is
  // vector-aligned; call stream_fence before another thread may read out.
  void (*store_row)(const float* src, int64_t visible, int64_t n, float scale, float fill,
                    bool stream, float* out);
  void (*stream_fence)();

  // The tiled attention pass (cpu_tiled_attention.cc).
  // The largest of row[0, n) (-inf when n == 0).
  float (*row_max)(const float* row, int64_t n);
  // row[j] = exp(row[j] - shift) (-inf entries give 0; arguments above 0
  // give 1), returning the sum of the results in 16 fixed lanes.
  float (*exp_sum_row)(float* row, int64_t n, float shift);
  // row[j] = cap * tanh(row[j] / cap), cap > 0.
  void (*softcap_row)(float* row, int64_t n, float cap);
  // row[j] -= slope * |q_pos - k_pos[j]| (ALiBi).
  void (*alibi_row)(float* row, int64_t n, float slope, float q_pos, const float* k_pos);
  // acc[j] += row[j].
  void (*add_row)(float* acc, const float* row, int64_t n);
  // The products of a few query rows (decode), without a GEMM's packing:
  // s[r * n + j] = scale * (q[r] . k[j]) (rows of d floats, the d products
  // summed in 16 fixed lanes, the lanes as a fixed tree), and
  // o[r][c] += sum_j p[r * n + j] * v[j * ld + c] (j in order; v of
  // `dtype`, ld in elements, widened in registers).
  void (*skinny_logits)(const float* q, int64_t m, const float* k, int64_t n, int64_t d,
                        float scale, float* s);
  void (*skinny_values)(const float* p, int64_t m, int64_t n, DType dtype, const void* v,
                        int64_t ld, int64_t dv, float* o);
  // skinny_logits over keys rotated as they are read (RotatedKeysParams).
  void (*skinny_rotated_logits)(const RotatedKeysParams& p);
};

// One compiled path: its kernels, and whether this CPU can run them.
struct CompiledKernels {
  const CpuKernels* kernels;
  bool supported;
};

// Every path this binary was compiled with, best first.
const std::vector<CompiledKernels>& AllCompiledKernels();

// The best path this CPU runs (Highway's HWY_DYNAMIC_DISPATCH choice).
const CpuKernels& BestCpuKernels();

}  // namespace cpu
}  // namespace rope

#endif  // ROPE_BACKENDS_CPU_CPU_KERNELS_H_
