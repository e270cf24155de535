// Defaults that the server and its clients must agree on. Each side may
// override them (flags, options); these are the values used when nobody does.
#ifndef ROPE_COMMON_DEFAULTS_H_
#define ROPE_COMMON_DEFAULTS_H_

#include <cstdint>

namespace rope {

// The gRPC port ropeserve listens on and ropectl / ropeload call by default.
inline constexpr int kDefaultPort = 50051;

// The largest message either side sends or accepts by default (512 MiB):
// ropeserve's --max_message_bytes and the client's ClientOptions.
inline constexpr int64_t kDefaultMaxMessageBytes = int64_t{512} << 20;

// RoPE base used when RopeConfig.theta is 0 (Hugging Face's rope_theta default).
inline constexpr double kDefaultTheta = 10000.0;

}  // namespace rope

#endif  // ROPE_COMMON_DEFAULTS_H_
