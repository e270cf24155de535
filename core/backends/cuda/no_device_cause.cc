#include "core/backends/cuda/no_device_cause.h"

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace rope {

std::string NoCudaDeviceCause(absl::string_view error_name, absl::string_view error_text,
                              const std::string& driver_version_file) {
  std::ifstream version(driver_version_file);
  if (!version) {
    return absl::StrCat("no NVIDIA GPU driver on this machine (no ", driver_version_file,
                        "): there is no GPU to use; on a GPU machine, install the NVIDIA driver");
  }
  std::string line;
  std::getline(version, line);
  if (error_name == "cudaErrorInsufficientDriver") {
    return absl::StrCat("the NVIDIA driver (", absl::StripAsciiWhitespace(line),
                        ") is older than the CUDA runtime of this build: update the NVIDIA driver "
                        "(cudaGetDeviceCount: ", error_name, ")");
  }
  if (error_name == "cudaErrorNoDevice") {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    return absl::StrCat("the NVIDIA driver is loaded but CUDA sees no GPU",
                        visible != nullptr
                            ? absl::StrCat(" (CUDA_VISIBLE_DEVICES=\"", visible, "\" hides them?)")
                            : std::string(),
                        " (cudaGetDeviceCount: ", error_name, ")");
  }
  return absl::StrCat("cudaGetDeviceCount: ", error_name, ": ", error_text);
}

}  // namespace rope
