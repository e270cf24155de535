// Arrival times of an open-loop load: a constant rate (one request every
// 1/rps seconds) or a Poisson process (independent exponential gaps with
// mean 1/rps), reproducible from a seed on every platform (std::mt19937_64
// and our own inverse-CDF transform, not std::exponential_distribution).
//
// Thread-compatible.
#ifndef ROPE_CLIENT_LOAD_ARRIVALS_H_
#define ROPE_CLIENT_LOAD_ARRIVALS_H_

#include <cstdint>
#include <random>

#include "absl/time/time.h"

namespace rope {
namespace load {

class ArrivalSchedule {
 public:
  // Precondition: rps > 0.
  ArrivalSchedule(double rps, bool poisson, uint64_t seed);

  // Offset from the start of the run of the next arrival; the first is 0
  // for a constant rate and one exponential gap for Poisson.
  absl::Duration Next();

 private:
  double rps_;
  bool poisson_;
  std::mt19937_64 rng_;
  int64_t index_ = 0;
  double seconds_ = 0;  // Poisson: running sum of the gaps
};

}  // namespace load
}  // namespace rope

#endif  // ROPE_CLIENT_LOAD_ARRIVALS_H_
