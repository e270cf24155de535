// ropeserve: the RoPE gRPC server.
//
// Parses flags, picks a backend, starts a RopeServer, and waits for SIGTERM or
// SIGINT; then drains (health NOT_SERVING, new calls UNAVAILABLE, calls in
// flight finish within --shutdown_grace_period) and exits 0. When the backend
// fails for good (BackendInfo::fault: a sticky CUDA error), it drains the
// same way and exits kExitBackendFailed, so that the orchestrator restarts it.
#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/defaults.h"
#include "server/backends/cpu/cpu_backend.h"
#include "server/backends/cpu/cpu_simd.h"
#include "server/backends/cuda/cuda_backend.h"
#include "server/engine/engine.h"
#include "server/service/rope_server.h"
#include "server/service/server_security.h"

ABSL_FLAG(std::string, listen, absl::StrCat("0.0.0.0:", rope::kDefaultPort),
          "host:port to serve gRPC on; port 0 picks a free port (printed on start)");
ABSL_FLAG(std::string, backend, "auto",
          "where the arithmetic runs: auto (CUDA when available, else CPU), cpu or cuda");
ABSL_FLAG(int32_t, cpu_threads, 0, "threads of the CPU backend; 0: one per hardware thread");
ABSL_FLAG(std::string, cpu_simd, "",
          "SIMD path of the CPU backend: auto (the best this CPU runs) or one of avx512, avx2, "
          "sse4, sse2 (neon, ... on Arm) to force it; empty: the ROPE_CPU_SIMD environment "
          "variable, else auto");
ABSL_FLAG(int32_t, work_threads, 0,
          "threads running calls (validation, then the backend); 0: one per hardware thread");
ABSL_FLAG(int64_t, inline_rotate_max_bytes, 64 << 10,
          "Rotate requests of at most this many bytes (explicit config fields, max_len <= 32768) "
          "are answered on the gRPC thread that received them, skipping the hand-off to a work "
          "thread; 0: every call goes to the work threads");
ABSL_FLAG(int64_t, max_message_bytes, rope::kDefaultMaxMessageBytes,
          "largest request or reply message, in bytes (at most 2147483647)");
ABSL_FLAG(int64_t, table_cache_bytes, int64_t{1} << 30,
          "byte budget of the cos/sin table cache (least recently used tables are evicted); "
          "the CUDA backend's device-resident cache has the same budget");
ABSL_FLAG(uint32_t, max_len_cap, 1u << 20, "largest RopeConfig.max_len accepted");
ABSL_FLAG(int64_t, max_elements_per_request, int64_t{1} << 28,
          "most tensor elements per request (q + k + v + scores)");
ABSL_FLAG(int64_t, max_concurrent_calls, 64,
          "calls in flight across all methods (a stream counts as one); more are refused with "
          "RESOURCE_EXHAUSTED; 0: no limit");
ABSL_FLAG(int32_t, metrics_port, 0, "port of the Prometheus /metrics endpoint; 0: off");
ABSL_FLAG(std::string, metrics_host, "0.0.0.0", "address the /metrics endpoint binds");
ABSL_FLAG(absl::Duration, shutdown_grace_period, absl::Seconds(25),
          "on SIGTERM/SIGINT, how long calls in flight may run before they are cancelled");
ABSL_FLAG(absl::Duration, max_connection_age, absl::Minutes(5),
          "close client connections (gracefully) after this age so that clients re-resolve and "
          "spread over new replicas; inf: never");
ABSL_FLAG(std::string, health_listen, "",
          "host:port of an extra plaintext port serving only grpc.health.v1, for probes that "
          "cannot do TLS or send tokens (Kubernetes gRPC probes); empty: none");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM certificate chain (leaf first) for TLS on the gRPC port; with --tls_key_file. "
          "Empty: plaintext");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key (unencrypted) of --tls_cert_file");
ABSL_FLAG(std::string, tls_client_ca_file, "",
          "PEM CA bundle: mutual TLS; clients must present a certificate signed by it "
          "(needs --tls_cert_file)");
ABSL_FLAG(std::string, auth_token_file, "",
          "file of accepted bearer tokens, one per line ('#' comments); every call except "
          "grpc.health.v1 must send \"authorization: Bearer <token>\" (needs --tls_cert_file)");
ABSL_FLAG(bool, enable_echo, false,
          "also serve rope.bench.v1.EchoService (benchmarks of the transport alone)");

namespace rope {
namespace {

// --backend=auto takes the CUDA backend when cudaGetDeviceCount finds a
// device (and the backend starts), else the CPU, and says which and why;
// --backend=cuda without a usable device is an error, not a silent downgrade.
// The CPU backend of --cpu_threads and --cpu_simd (else ROPE_CPU_SIMD).
absl::StatusOr<std::unique_ptr<Backend>> MakeCpuBackend() {
  CpuBackendOptions options;
  options.threads = absl::GetFlag(FLAGS_cpu_threads);
  options.simd = absl::GetFlag(FLAGS_cpu_simd);
  options.simd_origin = "--cpu_simd";
  if (options.simd.empty()) {
    options.simd = CpuSimdFromEnvironment();
    options.simd_origin = kCpuSimdEnv;
  }
  return NewCpuBackend(options);
}

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const std::string& choice) {
  if (choice != "auto" && choice != "cpu" && choice != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend is \"", choice, "\": must be auto, cpu or cuda"));
  }
  if (choice == "cpu") return MakeCpuBackend();
  CudaBackendOptions cuda_options;
  cuda_options.table_cache_bytes = absl::GetFlag(FLAGS_table_cache_bytes);
  absl::StatusOr<std::unique_ptr<Backend>> cuda = NewCudaBackend(0, cuda_options);
  if (choice == "cuda") {
    if (!cuda.ok()) {
      return absl::Status(cuda.status().code(),
                          absl::StrCat("--backend=cuda: ", cuda.status().message(),
                                       "; use --backend=cpu or --backend=auto"));
    }
    return cuda;
  }
  if (cuda.ok()) {
    std::fprintf(stderr, "ropeserve: --backend=auto: using the CUDA backend (device 0: %s)\n",
                 (*cuda)->info().device.c_str());
    return cuda;
  }
  std::fprintf(stderr, "ropeserve: --backend=auto: using the CPU backend (%s)\n",
               std::string(cuda.status().message()).c_str());
  return MakeCpuBackend();
}

absl::Status CheckFlags() {
  if (absl::GetFlag(FLAGS_metrics_port) < 0 || absl::GetFlag(FLAGS_metrics_port) > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics_port is ", absl::GetFlag(FLAGS_metrics_port), ": must be in [0, 65535]"));
  }
  if (absl::GetFlag(FLAGS_shutdown_grace_period) < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shutdown_grace_period is ",
        absl::FormatDuration(absl::GetFlag(FLAGS_shutdown_grace_period)), ": must be >= 0"));
  }
  if (absl::GetFlag(FLAGS_table_cache_bytes) <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--table_cache_bytes is ", absl::GetFlag(FLAGS_table_cache_bytes), ": must be > 0"));
  }
  if (absl::GetFlag(FLAGS_max_elements_per_request) <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("--max_elements_per_request is ",
                                                   absl::GetFlag(FLAGS_max_elements_per_request),
                                                   ": must be > 0"));
  }
  if (absl::GetFlag(FLAGS_max_len_cap) == 0) {
    return absl::InvalidArgumentError("--max_len_cap is 0: must be > 0");
  }
  // Checked even when the CUDA backend ends up serving: a typo must not hide.
  if (!absl::GetFlag(FLAGS_cpu_simd).empty()) {
    absl::StatusOr<const cpu::CpuKernels*> kernels =
        SelectCpuKernels(absl::GetFlag(FLAGS_cpu_simd), "--cpu_simd");
    if (!kernels.ok()) return kernels.status();
  }
  return absl::OkStatus();
}

// "plaintext", "TLS", "mutual TLS", each "+ bearer tokens" when set.
std::string DescribeSecurity(const ServerSecurity& security) {
  std::string mode = !security.tls()                  ? "plaintext"
                     : security.client_ca_pem.empty() ? "TLS"
                                                      : "mutual TLS";
  if (!security.bearer_tokens.empty()) {
    absl::StrAppend(&mode, " + bearer tokens (", security.bearer_tokens.size(), ")");
  }
  return mode;
}

// glibc gives threads that contend their own malloc arenas, up to 8 per
// core. Tensor buffers of many sizes freed into many arenas seldom go back to
// the system, so resident memory creeps under mixed load (bench/results/
// soak_*.md: +8.9% over nine minutes with glibc's default, +2.7% and the
// same throughput with 2 arenas). Cap them, unless MALLOC_ARENA_MAX is set.
void LimitMallocArenas() {
  if (std::getenv("MALLOC_ARENA_MAX") != nullptr) return;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  mallopt(M_ARENA_MAX, static_cast<int>(std::clamp(cores / 4, 2u, 8u)));
}

// Exit status after the backend failed for good (see BackendInfo::fault).
constexpr int kExitBackendFailed = 3;

int g_stop_pipe[2] = {-1, -1};
// Written to the stop pipe instead of a signal number (all below 65) when the
// backend fails.
constexpr unsigned char kBackendFailed = 255;

extern "C" void OnStopSignal(int signal) {
  const unsigned char byte = static_cast<unsigned char>(signal);
  // write() is async-signal-safe; a full pipe means a stop is pending anyway.
  const ssize_t ignored = write(g_stop_pipe[1], &byte, 1);
  (void)ignored;
}

absl::Status InstallStopSignalPipe() {
  if (pipe2(g_stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::InternalError(absl::StrCat("pipe2 for the stop signals failed: errno ", errno));
  }
  // Only the write end must not block (in the handler); the reader blocks.
  fcntl(g_stop_pipe[0], F_SETFL, fcntl(g_stop_pipe[0], F_GETFL) & ~O_NONBLOCK);
  struct sigaction action = {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int signal : {SIGTERM, SIGINT}) {
    if (sigaction(signal, &action, nullptr) != 0) {
      return absl::InternalError(
          absl::StrCat("sigaction(", signal, ") failed: errno ", errno));
    }
  }
  return absl::OkStatus();
}

// Blocks until SIGTERM or SIGINT arrives; returns its number.
int WaitForStopSignal() {
  unsigned char byte = 0;
  while (read(g_stop_pipe[0], &byte, 1) != 1) {
    if (errno != EINTR) return 0;
  }
  return byte;
}

// Until `stop` is notified, asks the backend every 250 ms whether it still
// works (a cheap, lock-only query); on its first fault, wakes the stop
// thread through the stop pipe as a signal would.
void WatchBackend(const Engine& engine, absl::Notification& stop) {
  while (!stop.WaitForNotificationWithTimeout(absl::Milliseconds(250))) {
    if (engine.backend_info().fault.empty()) continue;
    const ssize_t ignored = write(g_stop_pipe[1], &kBackendFailed, 1);
    (void)ignored;
    return;
  }
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "ropeserve: %s\n", status.ToString().c_str());
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

// Serves until SIGTERM or SIGINT, then drains. Returns the process exit code.
int RunServer() {
  LimitMallocArenas();
  absl::Status flags_ok = CheckFlags();
  if (!flags_ok.ok()) return Fail(flags_ok);

  // Self-pipe: the handler only writes the signal number to a pipe, and a
  // thread reads it and drains. (Blocking the signals for a sigwait thread is
  // not enough: OpenBLAS starts threads before main, with the signals open.)
  absl::Status signals_ok = InstallStopSignalPipe();
  if (!signals_ok.ok()) return Fail(signals_ok);

  absl::StatusOr<std::unique_ptr<Backend>> backend = MakeBackend(absl::GetFlag(FLAGS_backend));
  if (!backend.ok()) return Fail(backend.status());

  EngineLimits limits;
  limits.max_len_cap = absl::GetFlag(FLAGS_max_len_cap);
  limits.table_cache_bytes = absl::GetFlag(FLAGS_table_cache_bytes);
  limits.max_elements_per_request = absl::GetFlag(FLAGS_max_elements_per_request);
  auto engine = std::make_unique<Engine>(*std::move(backend), limits);
  const BackendInfo info = engine->backend_info();

  ServerSecurityFiles security_files;
  security_files.tls_cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  security_files.tls_key_file = absl::GetFlag(FLAGS_tls_key_file);
  security_files.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca_file);
  security_files.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  absl::StatusOr<ServerSecurity> security = LoadServerSecurity(security_files);
  if (!security.ok()) return Fail(security.status());

  ServerOptions options;
  options.security = *std::move(security);
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  options.max_concurrent_calls = absl::GetFlag(FLAGS_max_concurrent_calls);
  options.work_threads = absl::GetFlag(FLAGS_work_threads);
  options.inline_rotate_max_bytes = absl::GetFlag(FLAGS_inline_rotate_max_bytes);
  if (absl::GetFlag(FLAGS_metrics_port) != 0) {
    options.metrics_address =
        absl::StrCat(absl::GetFlag(FLAGS_metrics_host), ":", absl::GetFlag(FLAGS_metrics_port));
  }
  options.max_connection_age = absl::GetFlag(FLAGS_max_connection_age);
  options.enable_echo = absl::GetFlag(FLAGS_enable_echo);
  options.health_listen_address = absl::GetFlag(FLAGS_health_listen);

  absl::StatusOr<std::unique_ptr<RopeServer>> server =
      RopeServer::Start(std::move(engine), options);
  if (!server.ok()) return Fail(server.status());

  std::printf("ropeserve listening on %s (backend %s: %s; %s)\n",
              (*server)->bound_address().c_str(), info.name.c_str(), info.device.c_str(),
              DescribeSecurity(options.security).c_str());
  if ((*server)->health_port() != 0) {
    const std::string& health = options.health_listen_address;
    std::printf("ropeserve health on %s:%d (plaintext, grpc.health.v1 only)\n",
                health.substr(0, health.rfind(':')).c_str(), (*server)->health_port());
  }
  if ((*server)->metrics_port() != 0) {
    std::printf("ropeserve metrics on %s:%d/metrics\n",
                absl::GetFlag(FLAGS_metrics_host).c_str(), (*server)->metrics_port());
  }
  std::fflush(stdout);

  const absl::Duration grace = absl::GetFlag(FLAGS_shutdown_grace_period);
  RopeServer* const serving = server->get();
  bool backend_failed = false;  // written by `stopper` before it ends
  std::thread stopper([serving, grace, &backend_failed] {
    const int signal = WaitForStopSignal();
    serving->StartDraining();
    if (signal == kBackendFailed) {
      backend_failed = true;
      std::printf(
          "ropeserve: backend failed: %s: draining (grace %s), then exiting %d to be "
          "restarted\n",
          serving->engine().backend_info().fault.c_str(), absl::FormatDuration(grace).c_str(),
          kExitBackendFailed);
    } else {
      std::printf("ropeserve: signal %d: draining (grace %s)\n", signal,
                  absl::FormatDuration(grace).c_str());
    }
    std::fflush(stdout);
    serving->Drain(grace);
  });
  absl::Notification stop_watching;
  std::thread watcher(
      [serving, &stop_watching] { WatchBackend(serving->engine(), stop_watching); });
  serving->Wait();
  stopper.join();
  stop_watching.Notify();
  watcher.join();
  server->reset();
  std::printf("ropeserve: stopped\n");
  return backend_failed ? kExitBackendFailed : 0;
}

}  // namespace
}  // namespace rope

int main(int argc, char** argv) {
  // --help lists the flags of this file (absl's default looks for a file
  // named after the binary); --version prints the project version.
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view path) {
    return absl::EndsWith(path, "server/main.cc");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  usage.version_string = [] { return std::string("ropeserve " ROPE_VERSION "\n"); };
  absl::SetFlagsUsageConfig(usage);
  absl::SetProgramUsageMessage(
      "Serves rotary position embeddings (rope.v1.RopeService) over gRPC.\n"
      "Usage: ropeserve [--listen=0.0.0.0:50051] [--backend=auto|cpu|cuda] [flags]\n"
      "Health (grpc.health.v1) and server reflection are always on. SIGTERM or SIGINT\n"
      "drains: health turns NOT_SERVING, new calls get UNAVAILABLE, calls in flight\n"
      "finish within --shutdown_grace_period, then the process exits 0. A backend that\n"
      "fails for good (a sticky CUDA error) drains the same way, then exits 3.");
  absl::ParseCommandLine(argc, argv);
  return rope::RunServer();
}
