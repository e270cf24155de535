// cudaGetErrorName and cudaGetErrorString of the fake runtime, for the
// errors the backend can meet (and the fake can inject).
#include <cuda_runtime_api.h>

namespace {

#define ROPE_FAKE_CUDA_ERRORS(X)                                                                 \
  X(cudaSuccess, "no error")                                                                     \
  X(cudaErrorInvalidValue, "invalid argument")                                                   \
  X(cudaErrorMemoryAllocation, "out of memory")                                                  \
  X(cudaErrorInitializationError, "initialization error")                                        \
  X(cudaErrorInvalidConfiguration, "invalid configuration argument")                             \
  X(cudaErrorInvalidDevicePointer, "invalid device pointer")                                     \
  X(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy")                        \
  X(cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version") \
  X(cudaErrorNoDevice, "no CUDA-capable device is detected")                                     \
  X(cudaErrorInvalidDevice, "invalid device ordinal")                                            \
  X(cudaErrorDevicesUnavailable, "CUDA-capable device(s) is/are busy or unavailable")            \
  X(cudaErrorContained, "uncorrectable error contained")                                         \
  X(cudaErrorNoKernelImageForDevice,                                                             \
    "no kernel image is available for execution on the "                                         \
    "device")                                                                                    \
  X(cudaErrorECCUncorrectable, "uncorrectable ECC error encountered")                            \
  X(cudaErrorUnsupportedPtxVersion,                                                              \
    "the provided PTX was compiled with an unsupported "                                         \
    "toolchain.")                                                                                \
  X(cudaErrorInvalidResourceHandle, "invalid resource handle")                                   \
  X(cudaErrorNotReady, "device not ready")                                                       \
  X(cudaErrorIllegalAddress, "an illegal memory access was encountered")                         \
  X(cudaErrorLaunchOutOfResources, "too many resources requested for launch")                    \
  X(cudaErrorLaunchTimeout, "the launch timed out and was terminated")                           \
  X(cudaErrorAssert, "device-side assert triggered")                                             \
  X(cudaErrorHardwareStackError, "hardware stack error")                                         \
  X(cudaErrorIllegalInstruction, "an illegal instruction was encountered")                       \
  X(cudaErrorMisalignedAddress, "misaligned address")                                            \
  X(cudaErrorInvalidAddressSpace,                                                                \
    "operation not supported on global/shared address "                                          \
    "space")                                                                                     \
  X(cudaErrorInvalidPc, "invalid program counter")                                               \
  X(cudaErrorLaunchFailure, "unspecified launch failure")                                        \
  X(cudaErrorTensorMemoryLeak, "tensor memory not completely freed")                             \
  X(cudaErrorNotPermitted, "operation not permitted")                                            \
  X(cudaErrorNotSupported, "operation not supported")                                            \
  X(cudaErrorSystemDriverMismatch,                                                               \
    "system has unsupported display driver / cuda driver "                                       \
    "combination")                                                                               \
  X(cudaErrorCompatNotSupportedOnDevice,                                                         \
    "forward compatibility was attempted on non "                                                \
    "supported HW")                                                                              \
  X(cudaErrorMpsClientTerminated, "MPS client terminated")                                       \
  X(cudaErrorExternalDevice, "external device error")                                            \
  X(cudaErrorUnknown, "unknown error")

}  // namespace

extern "C" {

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
#define ROPE_FAKE_CUDA_NAME(name, text) \
  case name:                            \
    return #name;
    ROPE_FAKE_CUDA_ERRORS(ROPE_FAKE_CUDA_NAME)
#undef ROPE_FAKE_CUDA_NAME
    default:
      return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
#define ROPE_FAKE_CUDA_TEXT(name, text) \
  case name:                            \
    return text;
    ROPE_FAKE_CUDA_ERRORS(ROPE_FAKE_CUDA_TEXT)
#undef ROPE_FAKE_CUDA_TEXT
    default:
      return "unrecognized error code";
  }
}

}  // extern "C"
