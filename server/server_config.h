// ropeserve's whole configuration, grouped as Triton's server options are
// (backend, engine limits, listen + limits + security + shared memory in
// ServerOptions, lifecycle), filled from the command line in one function
// and validated whole before anything is created.
//
// server_flags.cc is the one place where every flag and its default are
// defined; ServerConfigFromFlags is the one place that reads them. main.cc
// only runs the process: it creates the backend from a configuration that
// has already passed every check, so a mistyped flag or an unusable
// certificate never waits for (or disturbs) a GPU being initialised.
#ifndef ROPE_SERVER_SERVER_CONFIG_H_
#define ROPE_SERVER_SERVER_CONFIG_H_

#include <string>

#include "absl/flags/commandlineflag.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/engine/engine.h"
#include "server/service/cpu_limit.h"
#include "server/service/rope_server.h"

namespace rope {

// Where the arithmetic runs.
struct BackendConfig {
  std::string choice = "auto";  // auto, cpu or cuda
  int cpu_threads = 1;          // resolved: the flag, or one per usable CPU
  // The CPU SIMD path to force ("" or "auto": the best this CPU runs) and
  // where that name came from (--cpu_simd or the ROPE_CPU_SIMD variable),
  // for messages. Checked to name a compiled path even when CUDA serves.
  std::string cpu_simd;
  std::string cpu_simd_origin;
  int64_t table_cache_bytes = int64_t{1} << 30;  // the CUDA backend's device cache too
};

// How the process stops.
struct LifecycleConfig {
  absl::Duration shutdown_grace_period = absl::Seconds(25);
  absl::Duration teardown_timeout = absl::Seconds(5);
  absl::Duration listener_stuck_after = absl::Seconds(10);  // zero: not watched
};

struct ServerConfig {
  BackendConfig backend;
  EngineLimits engine;
  // Listen addresses, message and in-flight limits, security (loaded and
  // checked), shared memory, metrics, connection ages.
  ServerOptions server;
  LifecycleConfig lifecycle;
  std::string grpc_verbosity;  // server_log.h
  std::string metrics_host;    // for the start-up line (server.metrics_address has it too)
  // Whether a thread count was left to its default (the log then says how
  // many CPUs the process may use), and how server.max_inflight_bytes was
  // chosen: log lines printed once the server starts.
  bool default_thread_counts = false;
  std::string inflight_line;
};

// Every flag read, defaults applied, the security files loaded, and the
// whole checked (including what RopeServer::Start would refuse):
// INVALID_ARGUMENT naming the flag and its value, or the unusable file.
// Creates no backend, thread or socket.
absl::StatusOr<ServerConfig> ServerConfigFromFlags();

// Whether `flag` is one of ropeserve's own (defined in server_flags.cc), for
// --help.
bool IsServerFlag(const absl::CommandLineFlag& flag);

// The CPUs this process may use (cpu_limit.h), read once: the default thread
// counts and the malloc arena cap.
const CpuLimit& ProcessCpus();

}  // namespace rope

#endif  // ROPE_SERVER_SERVER_CONFIG_H_
