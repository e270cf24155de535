// What the CUDA backend tests run on. rope_cuda_backend_test links
// real_device.cc: the machine's CUDA runtime and its GPU, if any (device
// tests skip without one). rope_cuda_fake_device_test links
// fake_device_under_test.cc: the fake runtime of tests/cuda/fake_runtime,
// on which the same device tests run on the CPU, with host-emulated kernels.
#ifndef ROPE_TESTS_CUDA_DEVICE_UNDER_TEST_H_
#define ROPE_TESTS_CUDA_DEVICE_UNDER_TEST_H_

#include <cstdint>

namespace rope {
namespace test {

// Called at the start of each test: the fake starts from its defaults (one
// device, no faults) and checks that cuBLAS resolves to the fake one.
void PrepareDevice();

// Whether the device is the fake runtime's.
bool DeviceIsFake();

// Makes CUDA report no device, if the runtime under test can (the fake
// can); false otherwise.
bool TryHideDevices();

// CUDA IPC mappings this process has open (cudaIpcOpenMemHandle not yet
// closed), where the runtime under test can count them (the fake can);
// -1 otherwise.
int64_t OpenIpcMappings();

}  // namespace test
}  // namespace rope

#endif  // ROPE_TESTS_CUDA_DEVICE_UNDER_TEST_H_
