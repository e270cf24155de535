// The machine's CUDA runtime (see device_under_test.h).
#include "tests/cuda/device_under_test.h"

namespace rope {
namespace test {

void PrepareDevice() {}
bool DeviceIsFake() { return false; }
bool TryHideDevices() { return false; }
int64_t OpenIpcMappings() { return -1; }

}  // namespace test
}  // namespace rope
