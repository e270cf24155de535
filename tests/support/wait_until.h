// Bounded waits for state another thread (a server's reactor, OnDone, a
// timer) changes after the event a test saw: a client sees a call's status
// before the server has run the call's OnDone, so a count the server settles
// there (bytes returned to the budget, a stream no longer open) is read by
// polling within a bound, never once. A value that never settles still
// fails the test: WaitUntil returns false at the bound.
#ifndef ROPE_TESTS_SUPPORT_WAIT_UNTIL_H_
#define ROPE_TESTS_SUPPORT_WAIT_UNTIL_H_

#include "absl/functional/function_ref.h"
#include "absl/time/time.h"

namespace rope {
namespace test {

// Generous on purpose: the bound only matters when the state never settles
// (the test fails then), and a sanitizer build on two busy cores lags a
// quiet machine's milliseconds by seconds.
inline constexpr absl::Duration kSettleTimeout = absl::Seconds(60);

// Calls `settled` until it returns true (true) or `timeout` has passed
// (false, after one last call), sleeping `interval` between calls.
bool WaitUntil(absl::FunctionRef<bool()> settled, absl::Duration timeout = kSettleTimeout,
               absl::Duration interval = absl::Milliseconds(5));

}  // namespace test
}  // namespace rope

#endif  // ROPE_TESTS_SUPPORT_WAIT_UNTIL_H_
