// Row conversions between 16-bit storage and float32 for the CPU hot loops.
// Results are bit-identical to math::HalfToFloat / FloatToHalf (round to
// nearest even) and the bfloat16 pair in rope_math.h, except that a NaN may
// keep more of its payload. float16 uses the F16C instructions when the CPU
// has them (checked once at run time), else the portable functions.
#ifndef ROPE_BACKENDS_CPU_CONVERT_ROWS_H_
#define ROPE_BACKENDS_CPU_CONVERT_ROWS_H_

#include <cstdint>

namespace rope {

void HalfRowToFloat(const uint16_t* src, int64_t n, float* dst);
void FloatRowToHalf(const float* src, int64_t n, uint16_t* dst);
void BFloat16RowToFloat(const uint16_t* src, int64_t n, float* dst);
void FloatRowToBFloat16(const float* src, int64_t n, uint16_t* dst);

}  // namespace rope

#endif  // ROPE_BACKENDS_CPU_CONVERT_ROWS_H_
