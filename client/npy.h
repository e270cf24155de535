// Reading and writing NumPy .npy files (format versions 1.0, 2.0 and 3.0).
//
// Only what ropectl exchanges is supported: little-endian, C order, and one
// of these element types:
//   '<f4'  float32
//   '<f2'  float16
//   '<f8'  float64 (NumPy's default; read only: converted to the tensor's dtype)
//   '<u2'  uint16, which ropectl uses for bfloat16: NumPy has no bfloat16, so
//          bfloat16 tensors are stored as their raw 16-bit patterns and read
//          back as bfloat16 only when the caller asks for it.
//   '<i2'  int16, read as bfloat16 bits like '<u2' (torch's
//          t.view(torch.int16).numpy() gives this; read only).
//   '<i4'  int32: replies' INT32 tensors (AttentionScores' top_k_indices);
//          never an input tensor.
// Anything else (fortran_order True, big-endian, other dtypes, object arrays)
// is rejected with INVALID_ARGUMENT naming the offending header field.
//
// Format reference: numpy/lib/format.py ("NPY format"). The header is a
// Python dict literal; we parse exactly the subset NumPy writes.
#ifndef ROPE_CLIENT_NPY_H_
#define ROPE_CLIENT_NPY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rope {
namespace client {

enum class NpyDType { kFloat32, kFloat16, kUInt16, kFloat64, kInt16, kInt32 };

// The descr string ('<f4', '<f2', '<u2', '<f8', '<i2', '<i4') and the element size
// in bytes.
absl::string_view NpyDTypeDescr(NpyDType dtype);
size_t NpyDTypeSize(NpyDType dtype);

// A dense array in C order. `data` holds exactly
// product(shape) * NpyDTypeSize(dtype) little-endian bytes. An empty shape is
// a 0-d array of one element.
struct NpyArray {
  NpyDType dtype = NpyDType::kFloat32;
  std::vector<int64_t> shape;
  std::string data;

  int64_t num_elements() const;
};

// Parses the bytes of a whole .npy file. INVALID_ARGUMENT (naming `what`, e.g.
// the file name) on a malformed or unsupported file, or when the payload
// length does not match the shape.
absl::StatusOr<NpyArray> ParseNpy(absl::string_view bytes, absl::string_view what = "npy");

// Serializes `array` as a version 1.0 file (2.0 when the header needs more
// than 65535 bytes). INVALID_ARGUMENT when data.size() does not match shape.
absl::StatusOr<std::string> SerializeNpy(const NpyArray& array);

// File wrappers. An I/O failure maps errno to its status code
// (absl::ErrnoToStatus: NOT_FOUND for a missing file, PERMISSION_DENIED, ...)
// with the path in the message. WriteNpyFile replaces an existing file.
absl::StatusOr<NpyArray> ReadNpyFile(const std::string& path);
absl::Status WriteNpyFile(const std::string& path, const NpyArray& array);

}  // namespace client
}  // namespace rope

#endif  // ROPE_CLIENT_NPY_H_
