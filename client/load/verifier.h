// Verifier: checks replies against a local oracle: the same engine the
// server runs, over the CPU backend in this process
// (core/proto_engine/local_engine.h), answering each request through the same
// per-RPC entries as the service (core/proto_engine/rope_calls.h), so that every
// request field (scaling included) means the same thing on both sides.
//
// The oracle's answer to each request variant (payload and config) is
// computed once, on first use.
// Values match when |got - want| <= atol + rtol * |want| (tolerances per
// dtype and RPC below, loose enough for a CUDA server's rounding), or when
// both are the same infinity or both NaN; shapes and dtypes must be equal.
//
// Thread-safe.
#ifndef ROPE_CLIENT_LOAD_VERIFIER_H_
#define ROPE_CLIENT_LOAD_VERIFIER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <google/protobuf/message.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/load/workload.h"
#include "core/proto_engine/local_engine.h"

namespace rope {
namespace load {

struct VerifyCheck {
  bool match = false;
  double max_abs_error = 0;
  std::string detail;  // the first mismatch, in words
};

class Verifier {
 public:
  // `workload` must outlive the verifier. INTERNAL if the CPU backend cannot
  // start.
  static absl::StatusOr<std::unique_ptr<Verifier>> Create(const Workload* workload);

  // Compares `reply` (a reply to request variant `payload`) with the
  // oracle. An error status when the oracle itself refuses the request (with
  // the engine's code and message).
  absl::StatusOr<VerifyCheck> Check(int payload, const google::protobuf::Message& reply);

 private:
  // The oracle's reply to one request variant, as the server would send it.
  using Expected = std::unique_ptr<google::protobuf::Message>;

  Verifier(const Workload* workload, std::unique_ptr<Engine> engine)
      : workload_(workload), engine_(std::move(engine)) {}
  absl::StatusOr<Expected> Compute(int payload) const;

  const Workload* const workload_;
  const std::unique_ptr<Engine> engine_;
  absl::Mutex mu_;
  std::map<int, Expected> expected_ ABSL_GUARDED_BY(mu_);
};

}  // namespace load
}  // namespace rope

#endif  // ROPE_CLIENT_LOAD_VERIFIER_H_
