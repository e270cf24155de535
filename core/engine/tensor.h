// Non-owning views of tensors in caller-owned memory: C order, little-endian
// elements of `dtype`, tagged with where the bytes are. The engine checks
// that `byte_size` matches shape x dtype before reading.
//
// A view is the only form in which a tensor reaches the engine, whatever it
// came as (inline request bytes, a host shared-memory region, a CUDA IPC
// region: core/proto_engine/tensor_resolver.h makes the views), the way
// Triton's shared-memory manager hands its core (address, memory type,
// device) and nothing about where the bytes came from.
#ifndef ROPE_ENGINE_TENSOR_H_
#define ROPE_ENGINE_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/engine/dtype.h"

namespace rope {

// Host memory is readable by the CPU; device memory belongs to one device
// of a backend with device memory (core/engine/device_memory.h) and must
// never be dereferenced on the host.
enum class MemoryKind : int { kHost = 0, kDevice = 1 };

// Where a tensor's bytes are: host memory, or the memory of device
// `device` (its ordinal, as the backend numbers its devices).
struct TensorMemory {
  MemoryKind kind = MemoryKind::kHost;
  int device = 0;  // meaningful for kDevice only

  static TensorMemory Host() { return TensorMemory{}; }
  static TensorMemory Device(int ordinal) { return TensorMemory{MemoryKind::kDevice, ordinal}; }
  bool is_host() const { return kind == MemoryKind::kHost; }
  bool operator==(const TensorMemory& other) const {
    return kind == other.kind && (kind == MemoryKind::kHost || device == other.device);
  }
  bool operator!=(const TensorMemory& other) const { return !(*this == other); }
  // "host memory" or "device 0 memory", for messages.
  std::string ToString() const;
};

struct TensorView {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  void* data = nullptr;
  size_t byte_size = 0;
  TensorMemory memory;
};

struct ConstTensorView {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t byte_size = 0;
  TensorMemory memory;

  ConstTensorView() = default;
  ConstTensorView(DType d, std::vector<int64_t> s, const void* p, size_t n,
                  TensorMemory m = TensorMemory::Host())
      : dtype(d), shape(std::move(s)), data(p), byte_size(n), memory(m) {}
  // A mutable view can always be read.
  ConstTensorView(const TensorView& t)  // NOLINT(google-explicit-constructor)
      : dtype(t.dtype), shape(t.shape), data(t.data), byte_size(t.byte_size), memory(t.memory) {}
};

}  // namespace rope

#endif  // ROPE_ENGINE_TENSOR_H_
