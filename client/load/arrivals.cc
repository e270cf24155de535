#include "client/load/arrivals.h"

#include <cmath>

namespace rope {
namespace load {

ArrivalSchedule::ArrivalSchedule(double rps, bool poisson, uint64_t seed)
    : rps_(rps), poisson_(poisson), rng_(seed) {}

absl::Duration ArrivalSchedule::Next() {
  if (!poisson_) {
    // index / rps rather than a running sum: no drift over long runs.
    return absl::Seconds(static_cast<double>(index_++) / rps_);
  }
  // u uniform on [0, 1) with 53 random bits; -log(1 - u) is Exp(1).
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
  seconds_ += -std::log1p(-u) / rps_;
  ++index_;
  return absl::Seconds(seconds_);
}

}  // namespace load
}  // namespace rope
