#include "tests/support/wait_until.h"

#include "absl/time/clock.h"

namespace rope {
namespace test {

bool WaitUntil(absl::FunctionRef<bool()> settled, absl::Duration timeout,
               absl::Duration interval) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!settled()) {
    if (absl::Now() >= deadline) return settled();
    absl::SleepFor(interval);
  }
  return true;
}

}  // namespace test
}  // namespace rope
