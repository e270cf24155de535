// ropeserve: the RoPE gRPC server.
//
// Parses flags, picks a backend, starts a RopeServer, and waits for SIGTERM,
// SIGINT or SIGQUIT; then drains (health NOT_SERVING, new calls UNAVAILABLE, calls in
// flight finish within --shutdown_grace_period) and exits 0. When the backend
// fails for good (BackendInfo::fault: a sticky CUDA error), it drains the
// same way and exits kExitBackendFailed, so that the orchestrator restarts it.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/defaults.h"
#include "core/backends/cpu/cpu_backend.h"
#include "core/backends/cpu/cpu_simd.h"
#include "core/backends/cuda/cuda_backend.h"
#include "core/engine/engine.h"
#include "core/proto_engine/shm_fault_guard.h"
#include "server/service/cpu_limit.h"
#include "server/service/listener_watch.h"
#include "server/service/malloc_settings.h"
#include "server/service/memory_limit.h"
#include "server/service/open_file_limit.h"
#include "server/service/rope_server.h"
#include "server/service/server_log.h"
#include "server/service/server_security.h"

ABSL_FLAG(std::string, listen, absl::StrCat("0.0.0.0:", rope::kDefaultPort),
          "where to serve gRPC, a comma-separated list: at most one host:port (port 0 picks a "
          "free port, printed on start) and any number of unix:///absolute/path sockets");
ABSL_FLAG(std::string, backend, "auto",
          "where the arithmetic runs: auto (CUDA when available, else CPU), cpu or cuda");
ABSL_FLAG(int32_t, cpu_threads, 0,
          "threads of the CPU backend; 0: one per CPU the process may use (its affinity mask, "
          "lowered to its cgroup's CPU quota: a pod's limits.cpu)");
ABSL_FLAG(std::string, cpu_simd, "",
          "SIMD path of the CPU backend: auto (the best this CPU runs) or one of avx512_bf16, avx512, "
          "avx2, sse4, sse2 (neon, ... on Arm) to force it; empty: the ROPE_CPU_SIMD environment "
          "variable, else auto");
ABSL_FLAG(int32_t, work_threads, 0,
          "threads running calls (validation, then the backend); 0: one per CPU the process may "
          "use, as --cpu_threads");
ABSL_FLAG(int64_t, inline_rotate_max_bytes, 64 << 10,
          "Rotate requests of at most this many bytes (explicit config fields, max_len <= 32768) "
          "are answered on the gRPC thread that received them, skipping the hand-off to a work "
          "thread; 0, or --max_calls_per_client set: every call goes to the work threads (then "
          "calls take turns by client)");
ABSL_FLAG(int64_t, max_message_bytes, rope::kDefaultMaxMessageBytes,
          "largest request or reply message, in bytes (at most 2147483647)");
ABSL_FLAG(int64_t, table_cache_bytes, int64_t{1} << 30,
          "byte budget of the cos/sin table cache (least recently used tables are evicted); "
          "the CUDA backend's device-resident cache has the same budget");
ABSL_FLAG(uint32_t, max_len_cap, 1u << 24,
          "largest RopeConfig.max_len accepted (tables are paged: a call builds only the "
          "4096-row blocks its positions touch)");
ABSL_FLAG(int64_t, max_table_blocks_per_call, 256,
          "most distinct 4096-row table blocks one call's positions may touch (more: "
          "RESOURCE_EXHAUSTED)");
ABSL_FLAG(int64_t, max_elements_per_request, int64_t{1} << 28,
          "most tensor elements per request (q + k + v + scores)");
ABSL_FLAG(int64_t, max_concurrent_calls, 64,
          "calls in flight across all methods (a stream counts as one); more are refused with "
          "RESOURCE_EXHAUSTED; 0: no limit");
ABSL_FLAG(int32_t, metrics_port, 0, "port of the Prometheus /metrics endpoint; 0: off");
ABSL_FLAG(std::string, metrics_host, "127.0.0.1",
          "address the /metrics endpoint binds (plaintext; 0.0.0.0 or the pod's address only "
          "where the network up to the scraper is trusted)");
ABSL_FLAG(absl::Duration, metrics_client_timeout, absl::Seconds(10),
          "a /metrics connection with no traffic for this long is closed (whole seconds)");
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
// Unix sockets and shared memory (docs/operations.md).
ABSL_FLAG(std::string, unix_socket_mode, "0660",
          "file mode (octal) of every unix:// socket of --listen; who may open it may call");
ABSL_FLAG(int64_t, shm_max_regions_per_client, 16,
          "shared-memory regions one client (token, mTLS subject or peer) may hold");
ABSL_FLAG(int64_t, shm_max_mapped_bytes, int64_t{16} << 30,
          "bytes of shared-memory regions mapped by all clients together; 0: shared memory off");
ABSL_FLAG(absl::Duration, shm_owner_idle_lease, absl::Hours(1),
          "a client's shared-memory regions are released once it has made no shared-memory "
          "call (register, status, a request referencing a region) for this long; 0 or inf: "
          "never");
ABSL_FLAG(std::string, shm_allowed_dir, "",
          "directory under which RegisterSharedMemory may name files (besides POSIX "
          "shared-memory objects \"/name\"); empty: none");

ABSL_FLAG(std::string, grpc_verbosity, "",
          "gRPC's own log lines on stderr: debug, info or error (that severity and above); "
          "empty: none (ropeserve names failures itself), unless GRPC_VERBOSITY or GRPC_TRACE "
          "is set");

ABSL_FLAG(bool, enable_echo, false,
          "also serve rope.bench.v1.EchoService (benchmarks of the transport alone)");

// Memory bound (docs/operations.md "Memory"): process memory ~= baseline +
// --table_cache_bytes + --max_inflight_bytes + margin.
ABSL_FLAG(int64_t, max_inflight_bytes, -1,
          "budget of request and reply bytes in flight: half for the transport's buffers of "
          "arriving messages (gRPC memory quota), half for admitted calls' requests and replies; "
          "a call that does not fit waits (up to its deadline and --max_inflight_wait) or is "
          "refused with RESOURCE_EXHAUSTED. -1: the cgroup's memory "
          "limit (else physical memory) less --table_cache_bytes and a margin (max(256 MiB, "
          "limit/8)), at least 64 MiB; 0: no limit");
ABSL_FLAG(absl::Duration, max_inflight_wait, absl::Seconds(10),
          "longest a call waits for room in --max_inflight_bytes when its deadline is later "
          "(or it has none)");
ABSL_FLAG(absl::Duration, max_connection_age_grace, absl::Minutes(1),
          "after --max_connection_age, how long calls still on a connection may run before it "
          "is closed; bounds how long a slow sender (one trickling a large message) holds "
          "transport memory to --max_connection_age + this; inf: no bound");

// Operations: port reuse and the bound on gRPC's teardown.
ABSL_FLAG(bool, reuse_port, false,
          "let other processes listen on the same port (SO_REUSEPORT); off: a second server on "
          "a taken port exits 1 naming the address instead of silently taking part of the "
          "traffic");
ABSL_FLAG(int64_t, max_calls_per_client, 0,
          "calls in flight per client (its bearer token, else its mTLS certificate subject, else "
          "its address): a client over this share gets RESOURCE_EXHAUSTED while others are "
          "served; 0: no per-client share (e.g. a quarter of --max_concurrent_calls lets four "
          "clients fill the server)");
ABSL_FLAG(int64_t, max_streams_per_connection, 100,
          "calls one connection may have open at once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS): "
          "a client past it queues its own calls, at no cost to the server; 0: no limit");
ABSL_FLAG(absl::Duration, listener_stuck_after, absl::Seconds(10),
          "when a connection to the TCP listener has waited this long without being accepted "
          "(gRPC's listener stops for good once accept fails with EMFILE), drain and exit 4 to "
          "be restarted; 0: do not watch");
ABSL_FLAG(absl::Duration, security_reload_interval, absl::Seconds(10),
          "how often the certificate, key, client-CA and token files are checked for new "
          "contents, taken without a restart (a malformed set keeps the current credentials, "
          "is logged and counted); 0: read once at start");
ABSL_FLAG(absl::Duration, teardown_timeout, absl::Seconds(5),
          "after the drain has answered every accepted call, how long gRPC's own teardown may "
          "take before the process exits anyway (with the drain's status)");

namespace rope {
namespace {

// The CPUs this process may use (cpu_limit.h), read once: the default of
// --work_threads and --cpu_threads, and the malloc arena cap.
const CpuLimit& ProcessCpus() {
  static const CpuLimit* const cpus = new CpuLimit(ProcessCpuLimit());
  return *cpus;
}

// A thread-count flag's value, its 0 meaning one per usable CPU.
int ThreadsOr(int flag_value) { return flag_value > 0 ? flag_value : ProcessCpus().cpus; }

// --backend=auto takes the CUDA backend when cudaGetDeviceCount finds a
// device (and the backend starts), else the CPU, and says which and why;
// --backend=cuda without a usable device is an error, not a silent downgrade.
// The CPU backend of --cpu_threads and --cpu_simd (else ROPE_CPU_SIMD).
absl::StatusOr<std::unique_ptr<Backend>> MakeCpuBackend() {
  CpuBackendOptions options;
  options.threads = ThreadsOr(absl::GetFlag(FLAGS_cpu_threads));
  options.simd = absl::GetFlag(FLAGS_cpu_simd);
  options.simd_origin = "--cpu_simd";
  if (options.simd.empty()) {
    options.simd = CpuSimdFromEnvironment();
    options.simd_origin = kCpuSimdEnv;
  }
  return NewCpuBackend(options);
}

// Precondition: `choice` checked by CheckFlags.
absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const std::string& choice) {
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
  if (absl::GetFlag(FLAGS_metrics_client_timeout) < absl::Seconds(1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics_client_timeout is ",
        absl::FormatDuration(absl::GetFlag(FLAGS_metrics_client_timeout)), ": must be >= 1s"));
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
  if (absl::GetFlag(FLAGS_max_table_blocks_per_call) <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("--max_table_blocks_per_call is ",
                                                   absl::GetFlag(FLAGS_max_table_blocks_per_call),
                                                   ": must be > 0"));
  }
  if (absl::GetFlag(FLAGS_max_elements_per_request) <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("--max_elements_per_request is ",
                                                   absl::GetFlag(FLAGS_max_elements_per_request),
                                                   ": must be > 0"));
  }
  if (absl::GetFlag(FLAGS_max_inflight_bytes) < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_inflight_bytes is ", absl::GetFlag(FLAGS_max_inflight_bytes),
                     ": must be > 0, 0 (no limit) or -1 (from the memory limit)"));
  }
  if (absl::GetFlag(FLAGS_max_inflight_wait) < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_inflight_wait is ",
                     absl::FormatDuration(absl::GetFlag(FLAGS_max_inflight_wait)),
                     ": must be >= 0"));
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
  if (absl::GetFlag(FLAGS_security_reload_interval) < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--security_reload_interval is ",
        absl::FormatDuration(absl::GetFlag(FLAGS_security_reload_interval)), ": must be >= 0"));
  }
  if (absl::GetFlag(FLAGS_listener_stuck_after) < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listener_stuck_after is ",
                     absl::FormatDuration(absl::GetFlag(FLAGS_listener_stuck_after)),
                     ": must be >= 0 (0: off)"));
  }
  if (absl::GetFlag(FLAGS_teardown_timeout) < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--teardown_timeout is ",
                     absl::FormatDuration(absl::GetFlag(FLAGS_teardown_timeout)),
                     ": must be >= 0"));
  }
  const std::string backend = absl::GetFlag(FLAGS_backend);
  if (backend != "auto" && backend != "cpu" && backend != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend is \"", backend, "\": must be auto, cpu or cuda"));
  }
  return absl::OkStatus();
}

// --listen's list into the TCP address and the Unix socket paths, and the
// shared-memory flags, into `options`.
absl::Status ApplyListenAndShmFlags(ServerOptions* options) {
  options->listen_address.clear();
  for (absl::string_view entry : absl::StrSplit(absl::GetFlag(FLAGS_listen), ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (entry.empty()) continue;
    if (absl::ConsumePrefix(&entry, "unix://")) {
      options->unix_socket_paths.emplace_back(entry);
    } else if (absl::StartsWith(entry, "unix:")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--listen entry \"", entry, "\": write Unix sockets as unix:///absolute/path"));
    } else if (!options->listen_address.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--listen names two host:port addresses (\"", options->listen_address, "\", \"",
          entry, "\"): at most one"));
    } else {
      options->listen_address = std::string(entry);
    }
  }
  const std::string mode = absl::GetFlag(FLAGS_unix_socket_mode);
  char* end = nullptr;
  const unsigned long parsed = std::strtoul(mode.c_str(), &end, 8);
  if (mode.empty() || *end != '\0' || parsed > 0777) {
    return absl::InvalidArgumentError(
        absl::StrCat("--unix_socket_mode is \"", mode, "\": expected octal 0000-0777"));
  }
  options->unix_socket_mode = static_cast<uint32_t>(parsed);
  options->shm.max_regions_per_client = absl::GetFlag(FLAGS_shm_max_regions_per_client);
  options->shm.max_mapped_bytes = absl::GetFlag(FLAGS_shm_max_mapped_bytes);
  options->shm.allowed_dir = absl::GetFlag(FLAGS_shm_allowed_dir);
  if (options->shm.max_regions_per_client < 1 || options->shm.max_mapped_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shm_max_regions_per_client is ", options->shm.max_regions_per_client,
        " and --shm_max_mapped_bytes ", options->shm.max_mapped_bytes,
        ": must be >= 1 and >= 0"));
  }
  // One owner must not be able to take the process-wide table of SIGBUS
  // guard slots (shm_fault_guard.h) from the others.
  if (options->shm.max_regions_per_client > kShmGuardSlots / 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shm_max_regions_per_client is ", options->shm.max_regions_per_client,
        ": at most ", kShmGuardSlots / 4, " (a quarter of the server's ", kShmGuardSlots,
        " guarded mappings)"));
  }
  const absl::Duration lease = absl::GetFlag(FLAGS_shm_owner_idle_lease);
  if (lease < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("--shm_owner_idle_lease is ",
                                                   absl::FormatDuration(lease),
                                                   ": must be > 0 (0 or inf: never)"));
  }
  options->shm.owner_idle_lease = lease == absl::ZeroDuration() ? absl::InfiniteDuration() : lease;
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

// glibc malloc set up for large messages (server/service/malloc_settings.h),
// unless the environment says otherwise. First thing in RunServer: the arena
// cap only holds for threads that have not allocated yet.
// Returns the log line.
std::string SetUpMalloc() {
  const MallocSettings settings = ChooseMallocSettings(ProcessCpus().cpus, std::getenv);
  std::string line = DescribeMallocSettings(settings);
  if (!ApplyMallocSettings(settings)) {
    // e.g. under a sanitizer, whose allocator ignores mallopt.
    line += " (not applied: this process's malloc refused mallopt)";
  }
  return line;
}

// Exit status (docs/operations.md): 0 after a drain; 1 a runtime failure
// (a port that cannot be bound, a backend that cannot start); 2 a usage or
// configuration error (unknown flag, bad value, unusable certificate or token
// file), found before the backend is created; 3 the backend failed for good
// (see BackendInfo::fault), after a drain; 4 the TCP listener stopped
// accepting connections for good (ListenerWatch), after a drain.
constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;
constexpr int kExitBackendFailed = 3;
constexpr int kExitListenerFailed = 4;

int g_stop_pipe[2] = {-1, -1};
// Written to the stop pipe instead of a signal number (all below 65) when the
// backend fails, or when the TCP listener stops accepting (ListenerWatch).
constexpr unsigned char kBackendFailed = 255;
constexpr unsigned char kListenerFailed = 254;

extern "C" void OnSignal(int signal) {
  const unsigned char byte = static_cast<unsigned char>(signal);
  // write() is async-signal-safe; a full pipe means a stop is pending anyway.
  const ssize_t ignored = write(g_stop_pipe[1], &byte, 1);
  (void)ignored;
}

// Signals that drain: SIGTERM (orchestrators), SIGINT (a terminal), SIGQUIT
// (the graceful stop of nginx and Go servers; its default would dump core
// and drop every call).
bool DrainsOn(int signal) { return signal == SIGTERM || signal == SIGINT || signal == SIGQUIT; }

// Signals whose default action ends the process and that ropeserve logs and
// ignores instead, so that a stray `kill -HUP` (a terminal closing, a
// supervisor's reload habit) or a profiler's signal drops no call and leaves
// no private copy of a key behind: SIGHUP (credentials reload on their own,
// every --security_reload_interval), SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM,
// SIGPROF, SIGIO, SIGPWR, SIGSTKFLT, SIGXFSZ and the real-time signals.
// Each is taken only while its disposition is still the default: a library
// that installed a handler of its own keeps it.
std::vector<int> IgnoredSignals() {
  std::vector<int> signals = {SIGHUP,  SIGUSR1, SIGUSR2, SIGALRM,   SIGVTALRM, SIGPROF,
                              SIGIO,   SIGPWR,  SIGXFSZ, SIGSTKFLT};
  for (int rt = SIGRTMIN; rt <= SIGRTMAX; ++rt) signals.push_back(rt);
  return signals;
}

absl::Status InstallStopSignalPipe() {
  if (pipe2(g_stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::InternalError(absl::StrCat("pipe2 for the stop signals failed: errno ", errno));
  }
  // Only the write end must not block (in the handler); the reader blocks.
  fcntl(g_stop_pipe[0], F_SETFL, fcntl(g_stop_pipe[0], F_GETFL) & ~O_NONBLOCK);
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int signal : {SIGTERM, SIGINT, SIGQUIT}) {
    if (sigaction(signal, &action, nullptr) != 0) {
      return absl::InternalError(
          absl::StrCat("sigaction(", signal, ") failed: errno ", errno));
    }
  }
  for (int signal : IgnoredSignals()) {
    struct sigaction current = {};
    if (sigaction(signal, nullptr, &current) != 0) continue;
    if (current.sa_handler != SIG_DFL || (current.sa_flags & SA_SIGINFO) != 0) continue;
    sigaction(signal, &action, nullptr);
  }
  // Writes to a closed peer fail with EPIPE instead of ending the process.
  signal(SIGPIPE, SIG_IGN);
  return absl::OkStatus();
}

// Blocks until a draining signal (SIGTERM, SIGINT, SIGQUIT) or a failure
// (kBackendFailed, kListenerFailed) arrives, and returns it; logs each
// ignored signal on the way.
int WaitForStopSignal() {
  while (true) {
    unsigned char byte = 0;
    if (read(g_stop_pipe[0], &byte, 1) != 1) {
      if (errno == EINTR) continue;
      return 0;
    }
    if (byte == kBackendFailed || byte == kListenerFailed || DrainsOn(byte)) return byte;
    std::printf("ropeserve: signal %d (%s) ignored: SIGTERM, SIGINT or SIGQUIT drain and stop\n",
                byte, sigabbrev_np(byte) != nullptr ? sigabbrev_np(byte) : "real-time");
    std::fflush(stdout);
  }
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

// --max_inflight_bytes, or (-1) the default derived from the memory limit;
// says which on stdout.
int64_t InflightBudget() {
  const int64_t flag = absl::GetFlag(FLAGS_max_inflight_bytes);
  if (flag >= 0) {
    std::printf("ropeserve: max_inflight_bytes %lld (--max_inflight_bytes)%s\n",
                static_cast<long long>(flag), flag == 0 ? ": no limit" : "");
    return flag;
  }
  const MemoryLimit limit = ProcessMemoryLimit();
  const int64_t table_cache = absl::GetFlag(FLAGS_table_cache_bytes);
  const int64_t budget = DefaultInflightBytes(limit.bytes, table_cache);
  std::printf(
      "ropeserve: max_inflight_bytes %lld = memory limit %lld (%s) - table_cache_bytes %lld - "
      "margin %lld%s\n",
      static_cast<long long>(budget), static_cast<long long>(limit.bytes), limit.source.c_str(),
      static_cast<long long>(table_cache), static_cast<long long>(MemoryMargin(limit.bytes)),
      budget == kMinDefaultInflightBytes ? " (raised to the 64 MiB floor: the limit is too small)"
                                         : "");
  return budget;
}

int Fail(const absl::Status& status, int exit_code) {
  std::fprintf(stderr, "ropeserve: %s\n", status.ToString().c_str());
  return exit_code;
}

// Bounded shutdown. gRPC 1.51's teardown (~Server -> grpc_shutdown) can wait
// ~10 s on an executor thread in epoll_wait after every call has been
// answered (bench/results/drain.md), longer than a short Kubernetes
// terminationGracePeriodSeconds. Once the drain has returned (every accepted
// call answered, or cancelled at the grace deadline), a detached thread
// gives the teardown and the process's exit `bound`, then ends the process
// with the drain's status: nothing is left to lose but gRPC's own cleanup.
void ArmTeardownWatchdog(absl::Duration bound, int exit_code) {
  std::thread([bound, exit_code] {
    absl::SleepFor(bound);
    std::fprintf(stdout,
                 "ropeserve: gRPC's teardown took over --teardown_timeout=%s after the drain: "
                 "exiting %d now\n",
                 absl::FormatDuration(bound).c_str(), exit_code);
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(exit_code);
  }).detach();
}

// Serves until SIGTERM, SIGINT or SIGQUIT, then drains. Returns the process exit code.
int RunServer() {
  // One ordered log stream (stderr), gRPC's lines only when asked.
  absl::Status log_ok = SetUpServerLog(absl::GetFlag(FLAGS_grpc_verbosity));
  if (!log_ok.ok()) return Fail(log_ok, kExitUsage);
  const std::string malloc_line = SetUpMalloc();
  // All configuration first: a bad flag or certificate must not wait for
  // (or disturb) a GPU being initialised.
  absl::Status flags_ok = CheckFlags();
  if (!flags_ok.ok()) return Fail(flags_ok, kExitUsage);
  ServerSecurityFiles security_files;
  security_files.tls_cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  security_files.tls_key_file = absl::GetFlag(FLAGS_tls_key_file);
  security_files.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca_file);
  security_files.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  absl::StatusOr<ServerSecurity> security = LoadServerSecurity(security_files);
  if (!security.ok()) return Fail(security.status(), kExitUsage);

  // Self-pipe: the handler only writes the signal number to a pipe, and a
  // thread reads it and drains. (Blocking the signals for a sigwait thread is
  // not enough: OpenBLAS starts threads before main, with the signals open.)
  absl::Status signals_ok = InstallStopSignalPipe();
  if (!signals_ok.ok()) return Fail(signals_ok, kExitRuntime);

  std::fprintf(stdout, "ropeserve: %s\n", DescribeOpenFileLimit(RaiseOpenFileLimit()).c_str());
  if (absl::GetFlag(FLAGS_work_threads) <= 0 || absl::GetFlag(FLAGS_cpu_threads) <= 0) {
    std::fprintf(stdout, "ropeserve: %d CPUs to use (%s): the default thread counts\n",
                 ProcessCpus().cpus, ProcessCpus().source.c_str());
  }
  std::fprintf(stdout, "ropeserve: malloc: %s\n", malloc_line.c_str());
  std::fflush(stdout);
  absl::StatusOr<std::unique_ptr<Backend>> backend = MakeBackend(absl::GetFlag(FLAGS_backend));
  if (!backend.ok()) return Fail(backend.status(), kExitRuntime);

  EngineLimits limits;
  limits.max_len_cap = absl::GetFlag(FLAGS_max_len_cap);
  limits.table_cache_bytes = absl::GetFlag(FLAGS_table_cache_bytes);
  limits.max_elements_per_request = absl::GetFlag(FLAGS_max_elements_per_request);
  limits.max_table_blocks_per_call = absl::GetFlag(FLAGS_max_table_blocks_per_call);
  auto engine = std::make_unique<Engine>(*std::move(backend), limits);
  const BackendInfo info = engine->backend_info();

  ServerOptions options;
  options.security = *std::move(security);
  absl::Status listen_ok = ApplyListenAndShmFlags(&options);
  if (!listen_ok.ok()) return Fail(listen_ok, kExitUsage);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  options.max_concurrent_calls = absl::GetFlag(FLAGS_max_concurrent_calls);
  options.work_threads = ThreadsOr(absl::GetFlag(FLAGS_work_threads));
  options.inline_rotate_max_bytes = absl::GetFlag(FLAGS_inline_rotate_max_bytes);
  if (absl::GetFlag(FLAGS_metrics_port) != 0) {
    options.metrics_address =
        absl::StrCat(absl::GetFlag(FLAGS_metrics_host), ":", absl::GetFlag(FLAGS_metrics_port));
  }
  options.metrics_client_timeout = absl::GetFlag(FLAGS_metrics_client_timeout);
  options.max_connection_age = absl::GetFlag(FLAGS_max_connection_age);
  options.enable_echo = absl::GetFlag(FLAGS_enable_echo);
  options.health_listen_address = absl::GetFlag(FLAGS_health_listen);
  options.max_inflight_bytes = InflightBudget();
  options.max_inflight_wait = absl::GetFlag(FLAGS_max_inflight_wait);
  options.reuse_port = absl::GetFlag(FLAGS_reuse_port);
  options.max_calls_per_client = absl::GetFlag(FLAGS_max_calls_per_client);
  options.max_streams_per_connection = absl::GetFlag(FLAGS_max_streams_per_connection);
  options.security_files = security_files;
  options.security_reload_interval = absl::GetFlag(FLAGS_security_reload_interval);
  if (const char* tmp = std::getenv("TMPDIR"); tmp != nullptr) options.security_staging_dir = tmp;
  options.max_connection_age_grace = absl::GetFlag(FLAGS_max_connection_age_grace);

  absl::StatusOr<std::unique_ptr<RopeServer>> server =
      RopeServer::Start(std::move(engine), options);
  if (!server.ok()) {
    return Fail(server.status(), server.status().code() == absl::StatusCode::kInvalidArgument
                                     ? kExitUsage
                                     : kExitRuntime);
  }

  std::printf("ropeserve listening on %s (backend %s: %s; %s)\n",
              (*server)->bound_address().c_str(), info.name.c_str(), info.device.c_str(),
              DescribeSecurity(options.security).c_str());
  for (const std::string& path : options.unix_socket_paths) {
    std::printf("ropeserve unix socket on unix://%s (mode %04o)\n", path.c_str(),
                options.unix_socket_mode);
  }
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
  // Written by the watch's thread before it wakes the stopper through the
  // pipe, read by the stopper after: the pipe orders the two.
  std::string listener_failure;
  std::unique_ptr<ListenerWatch> listener_watch;
  if ((*server)->port() != 0 && absl::GetFlag(FLAGS_listener_stuck_after) > absl::ZeroDuration()) {
    ListenerWatch::Options watch;
    watch.port = (*server)->port();
    watch.stuck_after = absl::GetFlag(FLAGS_listener_stuck_after);
    watch.interval = std::min(absl::Seconds(1), watch.stuck_after / 2);
    listener_watch = std::make_unique<ListenerWatch>(
        watch, [&listener_failure](const std::string& what) {
          listener_failure = what;
          const ssize_t ignored = write(g_stop_pipe[1], &kListenerFailed, 1);
          (void)ignored;
        });
  }
  bool backend_failed = false;  // written by `stopper` before it ends
  bool listener_failed = false;  // likewise
  std::thread stopper([serving, grace, &backend_failed, &listener_failed, &listener_failure] {
    const int signal = WaitForStopSignal();
    serving->StartDraining();
    if (signal == kListenerFailed) {
      listener_failed = true;
      std::printf("ropeserve: %s: draining (grace %s), then exiting %d to be restarted\n",
                  listener_failure.c_str(), absl::FormatDuration(grace).c_str(),
                  kExitListenerFailed);
    } else if (signal == kBackendFailed) {
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
  listener_watch.reset();
  const int exit_code =
      backend_failed ? kExitBackendFailed : (listener_failed ? kExitListenerFailed : 0);
  std::printf("ropeserve: drained\n");
  std::fflush(stdout);
  ArmTeardownWatchdog(absl::GetFlag(FLAGS_teardown_timeout), exit_code);
  server->reset();
  std::printf("ropeserve: stopped\n");
  return exit_code;
}

// The command line, with the spelling rules of ropectl and ropeload: a flag
// name may use '-' or '_' alike (--metrics-port = --metrics_port); only the
// name is rewritten, never the value.
std::vector<std::string> NormalizeFlagNames(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size(); ++i) {
    std::string& arg = args[i];
    if (arg == "--") break;  // the rest is positional
    if (arg.size() < 3 || arg[0] != '-') continue;
    const size_t name_begin = arg[1] == '-' ? 2 : 1;
    const size_t name_end = std::min(arg.find('='), arg.size());
    std::replace(arg.begin() + name_begin, arg.begin() + name_end, '-', '_');
  }
  return args;
}

constexpr char kUsage[] =
    "ropeserve: serves rotary position embeddings (rope.v1.RopeService) over gRPC.\n"
    "\n"
    "Usage: ropeserve [--listen=0.0.0.0:50051] [--backend=auto|cpu|cuda] [flags]\n"
    "Flag names take '-' or '_' alike (--metrics-port = --metrics_port); --flagfile=FILE\n"
    "reads flags from a file. Health (grpc.health.v1) and server reflection are always on.\n"
    "SIGTERM, SIGINT or SIGQUIT drains: health turns NOT_SERVING, new calls get UNAVAILABLE, calls\n"
    "in flight finish within --shutdown_grace_period, gRPC's teardown gets at most\n"
    "--teardown_timeout, then the process exits.\n"
    "\n"
    "Exit status: 0 stopped by SIGTERM/SIGINT after a drain; 1 runtime failure (a port\n"
    "that cannot be bound, a backend that cannot start); 2 usage or configuration error\n"
    "(unknown flag, bad value, unusable certificate, key or token file); 3 the backend\n"
    "failed for good (a sticky CUDA error), after a drain, to be restarted; 4 the TCP\n"
    "listener stopped accepting connections (see --listener_stuck_after), after a drain.\n"
    "SIGHUP, SIGUSR1, SIGUSR2 and other signals that would end the process are logged\n"
    "and ignored (certificates and tokens reload on their own).\n";

// --help: the usage and ropeserve's own flags (not absl's or gRPC's), with
// defaults; no source paths.
void PrintHelp() {
  std::printf("%s\nFlags:\n", kUsage);
  std::vector<const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (absl::EndsWith(flag->Filename(), "server/main.cc")) flags.push_back(flag);
  }
  std::sort(flags.begin(), flags.end(),
            [](const absl::CommandLineFlag* a, const absl::CommandLineFlag* b) {
              return a->Name() < b->Name();
            });
  for (const absl::CommandLineFlag* flag : flags) {
    std::printf("  --%s (default: %s)\n      %s\n", std::string(flag->Name()).c_str(),
                flag->DefaultValue().empty() ? "\"\"" : flag->DefaultValue().c_str(),
                flag->Help().c_str());
  }
  std::printf("  --version\n      print the version and exit\n");
}

// absl reports an unknown flag or a malformed value by printing it and
// calling exit(1); ropeserve's contract says 2 for every usage error. While
// the command line is parsed, an exit is such an error (--help and --version
// are answered before), and this handler turns its status into 2.
std::atomic<bool> g_parsing_command_line{false};
extern "C" void ExitTwoOnCommandLineError() {
  if (!g_parsing_command_line.load()) return;
  std::fprintf(stderr, "ropeserve: bad command line (see ropeserve --help)\n");
  std::fflush(stdout);
  _exit(kExitUsage);
}

}  // namespace
}  // namespace rope

int main(int argc, char** argv) {
  std::vector<std::string> args = rope::NormalizeFlagNames(argc, argv);
  for (size_t i = 1; i < args.size() && args[i] != "--"; ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-help" || arg == "-h" || arg == "--helpfull" ||
        arg == "--helpshort") {
      rope::PrintHelp();
      return 0;
    }
    if (arg == "--version" || arg == "-version") {
      std::printf("ropeserve %s\n", ROPE_VERSION);
      return 0;
    }
  }
  std::vector<char*> argv_normalized;
  for (std::string& arg : args) argv_normalized.push_back(arg.data());
  argv_normalized.push_back(nullptr);
  std::atexit(rope::ExitTwoOnCommandLineError);
  rope::g_parsing_command_line.store(true);
  absl::ParseCommandLine(static_cast<int>(args.size()), argv_normalized.data());
  rope::g_parsing_command_line.store(false);
  return rope::RunServer();
}
