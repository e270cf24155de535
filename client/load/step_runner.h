// RunStep: drives one load level against the server and measures it.
//
//   closed loop (plan.rps == 0): plan.concurrency workers, each with one
//     request in flight; a worker sends its next request from the previous
//     one's completion. Latency runs from the send.
//   open loop (plan.rps > 0): requests are sent at the ArrivalSchedule's
//     times whatever the replies do (gRPC's callback API: a slow reply never
//     delays an arrival); latency runs from the scheduled arrival, so a
//     client that falls behind shows it (no coordinated omission). Arrivals
//     finding spec.max_in_flight requests outstanding are dropped and
//     counted.
//
// A step runs spec.warmup unmeasured, then spec.duration (or until
// spec.requests measured requests are sent), then waits for the requests in
// flight. Every wait is bounded: with calls outstanding and no completion
// for spec.deadline + 1 s, everything in flight is cancelled and the step is
// marked stalled.
#ifndef ROPE_CLIENT_LOAD_STEP_RUNNER_H_
#define ROPE_CLIENT_LOAD_STEP_RUNNER_H_

#include <string>

#include "client/load/channel_pool.h"
#include "client/load/load_spec.h"
#include "client/load/progress.h"
#include "client/load/step_result.h"
#include "client/load/verifier.h"
#include "client/load/workload.h"

namespace rope {
namespace load {

struct StepContext {
  const LoadSpec* spec = nullptr;
  const Workload* workload = nullptr;
  const ChannelPool* pool = nullptr;
  Verifier* verifier = nullptr;  // nullptr: no verification
  int verify_budget = 0;         // replies to check in this step
  Progress* progress = nullptr;  // may be nullptr
  std::string label;             // shown on the progress bar: "c=8", "50 rps"
};

StepResult RunStep(const StepContext& context, const StepPlan& plan);

}  // namespace load
}  // namespace rope

#endif  // ROPE_CLIENT_LOAD_STEP_RUNNER_H_
