// Why CUDA found no device, in the machine's terms. cudaGetDeviceCount says
// cudaErrorInsufficientDriver ("driver version is insufficient") on a
// machine with no NVIDIA driver at all, where no driver is too old: the
// cause is the missing GPU. Plain C++ (no CUDA headers), always built, so
// that tests run it without a GPU.
#ifndef ROPE_CORE_BACKENDS_CUDA_NO_DEVICE_CAUSE_H_
#define ROPE_CORE_BACKENDS_CUDA_NO_DEVICE_CAUSE_H_

#include <string>

#include "absl/strings/string_view.h"

namespace rope {

// The NVIDIA kernel driver's version file; present only where the driver is loaded.
inline constexpr char kNvidiaDriverVersionFile[] = "/proc/driver/nvidia/version";

// The cause of a failed cudaGetDeviceCount (`error_name`, `error_text`: the
// CUDA error's name and text), given whether `driver_version_file` exists:
// no driver -> "no NVIDIA GPU driver on this machine ..."; a driver with
// cudaErrorInsufficientDriver -> the driver's version line and "update the
// NVIDIA driver"; a driver with cudaErrorNoDevice -> "sees no GPU" and
// CUDA_VISIBLE_DEVICES; anything else -> "cudaGetDeviceCount: NAME: TEXT".
std::string NoCudaDeviceCause(absl::string_view error_name, absl::string_view error_text,
                              const std::string& driver_version_file = kNvidiaDriverVersionFile);

}  // namespace rope

#endif  // ROPE_CORE_BACKENDS_CUDA_NO_DEVICE_CAUSE_H_
