// Every ropeserve flag, its default and its help text, and
// ServerConfigFromFlags: the one function that reads them into a
// ServerConfig and checks the whole before anything is created.
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/defaults.h"
#include "common/status_macros.h"
#include "core/backends/cpu/cpu_simd.h"
#include "core/proto_engine/shm_fault_guard.h"
#include "server/server_config.h"
#include "server/service/memory_limit.h"
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
          "calls in flight across all methods (a stream counts as one while a message of it is "
          "served; an idle stream holds no slot); more are refused with RESOURCE_EXHAUSTED; 0: "
          "no limit");
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
ABSL_FLAG(int64_t, shm_max_mapped_bytes_per_client, int64_t{4} << 30,
          "bytes of pages one client's shared-memory regions may map together (each region "
          "counts its range widened to whole pages)");
ABSL_FLAG(absl::Duration, shm_owner_idle_lease, absl::Hours(1),
          "a client's shared-memory regions are released once it has made no shared-memory "
          "call (register, status, a request referencing a region) for this long; 0 or inf: "
          "never");
ABSL_FLAG(std::string, shm_allowed_dir, "",
          "directory under which RegisterSharedMemory may name files (besides POSIX "
          "shared-memory objects \"/name\"); empty: none");

ABSL_FLAG(std::string, model_repository, "",
          "directory of models for the KServe v2 / Triton protocol (inference."
          "GRPCInferenceService, served beside rope.v1): one folder per model holding a "
          "config.json and a ropeserve.json (docs/operations.md); the built-in models rotate "
          "and attention are always there; empty: only those");

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
ABSL_FLAG(absl::Duration, reply_send_timeout, absl::Minutes(2),
          "longest a reply may take to be sent once ready (a stream's: each message's); a "
          "reply a client does not read by then cancels its call, which returns the reply's "
          "bytes to --max_inflight_bytes and its call slot; inf: no deadline");
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
ABSL_FLAG(int64_t, max_streams_per_client, 64,
          "streams (RotateStream, ModelStreamInfer) one client (its bearer token, else its "
          "mTLS certificate subject, else its address) may have open at once across all its "
          "connections; one more is refused at open with RESOURCE_EXHAUSTED while other clients "
          "open theirs. An idle stream holds no call slot but still costs a gRPC call and its "
          "buffers: 64 (the default --max_concurrent_calls) lets one client keep a stream per "
          "call the server can run at once, and bounds what a client opening streams on many "
          "connections holds. Behind a proxy without tokens every client is the proxy: raise "
          "it or 0. 0: no limit");
ABSL_FLAG(absl::Duration, stream_idle_timeout, absl::Minutes(2),
          "a stream with no message being served and none arriving for this long is finished "
          "by the server with UNAVAILABLE (safe to retry on a new stream: no message is lost); "
          "2m (as --reply_send_timeout) outlasts a client's pauses between requests, yet ends a "
          "forgotten stream sooner than the connection's age (--max_connection_age + grace) "
          "would, and bounds it where connections never age; inf: none");
ABSL_FLAG(int64_t, max_inflight_bytes_per_client, -1,
          "request and reply bytes one client's admitted calls may hold at once in the "
          "admitted calls' half of --max_inflight_bytes: past it its calls wait (up to their "
          "deadline and --max_inflight_wait) or are refused with RESOURCE_EXHAUSTED while other "
          "clients' calls are admitted; a client with nothing else in flight may still use the "
          "whole budget with one call. -1: half of the admitted calls' budget (a quarter of "
          "--max_inflight_bytes), so two clients can always make progress; 0: no per-client "
          "share");
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

// A thread-count flag's value, its 0 meaning one per usable CPU.
int ThreadsOr(int flag_value) { return flag_value > 0 ? flag_value : ProcessCpus().cpus; }

absl::Status NonNegative(absl::string_view flag, absl::Duration value, absl::string_view more) {
  if (value >= absl::ZeroDuration()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " is ", absl::FormatDuration(value), ": must be >= 0", more));
}

absl::Status Positive(absl::string_view flag, int64_t value) {
  if (value > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("--", flag, " is ", value, ": must be > 0"));
}

BackendConfig BackendFromFlags() {
  BackendConfig backend;
  backend.choice = absl::GetFlag(FLAGS_backend);
  backend.cpu_threads = ThreadsOr(absl::GetFlag(FLAGS_cpu_threads));
  backend.cpu_simd = absl::GetFlag(FLAGS_cpu_simd);
  backend.cpu_simd_origin = "--cpu_simd";
  if (backend.cpu_simd.empty()) {
    backend.cpu_simd = CpuSimdFromEnvironment();
    backend.cpu_simd_origin = kCpuSimdEnv;
  }
  backend.table_cache_bytes = absl::GetFlag(FLAGS_table_cache_bytes);
  return backend;
}

absl::Status CheckBackend(const BackendConfig& backend) {
  if (backend.choice != "auto" && backend.choice != "cpu" && backend.choice != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend is \"", backend.choice, "\": must be auto, cpu or cuda"));
  }
  // Checked even when the CUDA backend ends up serving: a typo must not hide.
  if (!backend.cpu_simd.empty()) {
    ROPE_RETURN_IF_ERROR(SelectCpuKernels(backend.cpu_simd, backend.cpu_simd_origin).status());
  }
  return Positive("table_cache_bytes", backend.table_cache_bytes);
}

absl::StatusOr<EngineLimits> EngineLimitsFromFlags() {
  EngineLimits limits;
  limits.max_len_cap = absl::GetFlag(FLAGS_max_len_cap);
  limits.table_cache_bytes = absl::GetFlag(FLAGS_table_cache_bytes);
  limits.max_elements_per_request = absl::GetFlag(FLAGS_max_elements_per_request);
  limits.max_table_blocks_per_call = absl::GetFlag(FLAGS_max_table_blocks_per_call);
  if (limits.max_len_cap == 0) return absl::InvalidArgumentError("--max_len_cap is 0: must be > 0");
  ROPE_RETURN_IF_ERROR(Positive("max_table_blocks_per_call", limits.max_table_blocks_per_call));
  ROPE_RETURN_IF_ERROR(Positive("max_elements_per_request", limits.max_elements_per_request));
  return limits;
}

// --listen's list into the TCP address and the Unix socket paths.
absl::Status ApplyListen(ServerOptions* options) {
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
  return absl::OkStatus();
}

absl::Status ApplyShm(ShmLimits* shm) {
  shm->max_regions_per_client = absl::GetFlag(FLAGS_shm_max_regions_per_client);
  shm->max_mapped_bytes = absl::GetFlag(FLAGS_shm_max_mapped_bytes);
  shm->max_mapped_bytes_per_client = absl::GetFlag(FLAGS_shm_max_mapped_bytes_per_client);
  shm->allowed_dir = absl::GetFlag(FLAGS_shm_allowed_dir);
  if (shm->max_mapped_bytes_per_client < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shm_max_mapped_bytes_per_client is ", shm->max_mapped_bytes_per_client,
                     ": must be >= 1 (--shm_max_mapped_bytes=0 turns shared memory off)"));
  }
  if (shm->max_regions_per_client < 1 || shm->max_mapped_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shm_max_regions_per_client is ", shm->max_regions_per_client,
        " and --shm_max_mapped_bytes ", shm->max_mapped_bytes, ": must be >= 1 and >= 0"));
  }
  // One owner must not be able to take the process-wide table of SIGBUS
  // guard slots (shm_fault_guard.h) from the others.
  if (shm->max_regions_per_client > kShmGuardSlots / 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shm_max_regions_per_client is ", shm->max_regions_per_client, ": at most ",
        kShmGuardSlots / 4, " (a quarter of the server's ", kShmGuardSlots,
        " guarded mappings)"));
  }
  const absl::Duration lease = absl::GetFlag(FLAGS_shm_owner_idle_lease);
  if (lease < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("--shm_owner_idle_lease is ",
                                                   absl::FormatDuration(lease),
                                                   ": must be > 0 (0 or inf: never)"));
  }
  shm->owner_idle_lease = lease == absl::ZeroDuration() ? absl::InfiniteDuration() : lease;
  return absl::OkStatus();
}

// --max_inflight_bytes, or (-1) the default derived from the memory limit,
// with the log line that says which.
absl::Status ApplyInflightBudget(ServerConfig* config) {
  const int64_t flag = absl::GetFlag(FLAGS_max_inflight_bytes);
  if (flag < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_inflight_bytes is ", flag,
                     ": must be > 0, 0 (no limit) or -1 (from the memory limit)"));
  }
  if (flag >= 0) {
    config->server.max_inflight_bytes = flag;
    config->inflight_line = absl::StrCat("max_inflight_bytes ", flag, " (--max_inflight_bytes)",
                                         flag == 0 ? ": no limit" : "");
    return absl::OkStatus();
  }
  const MemoryLimit limit = ProcessMemoryLimit();
  const int64_t table_cache = config->backend.table_cache_bytes;
  const int64_t budget = DefaultInflightBytes(limit.bytes, table_cache);
  config->server.max_inflight_bytes = budget;
  config->inflight_line = absl::StrCat(
      "max_inflight_bytes ", budget, " = memory limit ", limit.bytes, " (", limit.source,
      ") - table_cache_bytes ", table_cache, " - margin ", MemoryMargin(limit.bytes),
      budget == kMinDefaultInflightBytes ? " (raised to the 64 MiB floor: the limit is too small)"
                                         : "");
  return absl::OkStatus();
}

// Listen, limits, security, shared memory, metrics and connection ages.
absl::Status ApplyServerOptions(ServerConfig* config) {
  ServerOptions& options = config->server;
  ROPE_RETURN_IF_ERROR(ApplyListen(&options));
  ROPE_RETURN_IF_ERROR(ApplyShm(&options.shm));
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  if (options.max_message_bytes <= 0 || options.max_message_bytes > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("--max_message_bytes is ",
                                                   options.max_message_bytes,
                                                   ": must be in [1, ", INT_MAX, "]"));
  }
  options.max_concurrent_calls = absl::GetFlag(FLAGS_max_concurrent_calls);
  options.work_threads = ThreadsOr(absl::GetFlag(FLAGS_work_threads));
  options.inline_rotate_max_bytes = absl::GetFlag(FLAGS_inline_rotate_max_bytes);

  const int metrics_port = absl::GetFlag(FLAGS_metrics_port);
  if (metrics_port < 0 || metrics_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_port is ", metrics_port, ": must be in [0, 65535]"));
  }
  config->metrics_host = absl::GetFlag(FLAGS_metrics_host);
  if (metrics_port != 0) {
    options.metrics_address = absl::StrCat(config->metrics_host, ":", metrics_port);
  }
  options.metrics_client_timeout = absl::GetFlag(FLAGS_metrics_client_timeout);
  if (options.metrics_client_timeout < absl::Seconds(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_client_timeout is ",
                     absl::FormatDuration(options.metrics_client_timeout), ": must be >= 1s"));
  }

  options.max_connection_age = absl::GetFlag(FLAGS_max_connection_age);
  if (options.max_connection_age <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_connection_age is ", absl::FormatDuration(options.max_connection_age),
                     ": must be > 0 (inf: never)"));
  }
  options.reply_send_timeout = absl::GetFlag(FLAGS_reply_send_timeout);
  if (options.reply_send_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("--reply_send_timeout is ",
                                                   absl::FormatDuration(options.reply_send_timeout),
                                                   ": must be > 0 (inf: no deadline)"));
  }
  options.max_connection_age_grace = absl::GetFlag(FLAGS_max_connection_age_grace);
  ROPE_RETURN_IF_ERROR(NonNegative("max_connection_age_grace", options.max_connection_age_grace,
                                   " (inf: no bound)"));
  options.enable_echo = absl::GetFlag(FLAGS_enable_echo);
  // Loaded (and each folder checked) when the server starts: RopeServer::Start.
  options.model_repository = absl::GetFlag(FLAGS_model_repository);
  options.health_listen_address = absl::GetFlag(FLAGS_health_listen);
  ROPE_RETURN_IF_ERROR(ApplyInflightBudget(config));
  options.max_inflight_wait = absl::GetFlag(FLAGS_max_inflight_wait);
  ROPE_RETURN_IF_ERROR(NonNegative("max_inflight_wait", options.max_inflight_wait, ""));
  options.reuse_port = absl::GetFlag(FLAGS_reuse_port);
  options.max_calls_per_client = absl::GetFlag(FLAGS_max_calls_per_client);
  options.max_streams_per_connection = absl::GetFlag(FLAGS_max_streams_per_connection);
  options.max_streams_per_client = absl::GetFlag(FLAGS_max_streams_per_client);
  options.stream_idle_timeout = absl::GetFlag(FLAGS_stream_idle_timeout);
  if (options.stream_idle_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--stream_idle_timeout is ",
                     absl::FormatDuration(options.stream_idle_timeout), ": must be > 0 (inf: none)"));
  }
  options.max_inflight_bytes_per_client = absl::GetFlag(FLAGS_max_inflight_bytes_per_client);
  if (options.max_inflight_bytes_per_client < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_inflight_bytes_per_client is ", options.max_inflight_bytes_per_client,
        ": must be >= 0 (0: none), or -1 (half of the admitted calls' budget)"));
  }
  if (options.max_inflight_bytes_per_client > 0 && options.max_inflight_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_inflight_bytes_per_client is ", options.max_inflight_bytes_per_client,
        ": a share of --max_inflight_bytes, which is 0 (no budget); set both or neither"));
  }
  if (const int64_t share = ClientInflightShare(options); share > 0) {
    absl::StrAppend(&config->inflight_line, "; one client's calls hold at most ", share,
                    " (--max_inflight_bytes_per_client)");
  }

  options.security_files.tls_cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  options.security_files.tls_key_file = absl::GetFlag(FLAGS_tls_key_file);
  options.security_files.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca_file);
  options.security_files.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  options.security_reload_interval = absl::GetFlag(FLAGS_security_reload_interval);
  ROPE_RETURN_IF_ERROR(
      NonNegative("security_reload_interval", options.security_reload_interval, ""));
  ROPE_ASSIGN_OR_RETURN(options.security, LoadServerSecurity(options.security_files));
  if (const char* tmp = std::getenv("TMPDIR"); tmp != nullptr) options.security_staging_dir = tmp;

  // What RopeServer::Start would refuse: with the flags checked above, only
  // the listen addresses (Unix socket paths, host:port form) are left.
  const absl::Status valid = ValidateServerOptions(options);
  if (!valid.ok()) {
    return absl::Status(valid.code(), absl::StrCat("--listen=", absl::GetFlag(FLAGS_listen),
                                                   ": ", valid.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<LifecycleConfig> LifecycleFromFlags() {
  LifecycleConfig lifecycle;
  lifecycle.shutdown_grace_period = absl::GetFlag(FLAGS_shutdown_grace_period);
  lifecycle.teardown_timeout = absl::GetFlag(FLAGS_teardown_timeout);
  lifecycle.listener_stuck_after = absl::GetFlag(FLAGS_listener_stuck_after);
  ROPE_RETURN_IF_ERROR(NonNegative("shutdown_grace_period", lifecycle.shutdown_grace_period, ""));
  ROPE_RETURN_IF_ERROR(NonNegative("teardown_timeout", lifecycle.teardown_timeout, ""));
  ROPE_RETURN_IF_ERROR(
      NonNegative("listener_stuck_after", lifecycle.listener_stuck_after, " (0: off)"));
  return lifecycle;
}

}  // namespace

const CpuLimit& ProcessCpus() {
  static const CpuLimit* const cpus = new CpuLimit(ProcessCpuLimit());
  return *cpus;
}

absl::StatusOr<ServerConfig> ServerConfigFromFlags() {
  ServerConfig config;
  config.grpc_verbosity = absl::GetFlag(FLAGS_grpc_verbosity);
  config.backend = BackendFromFlags();
  ROPE_RETURN_IF_ERROR(CheckBackend(config.backend));
  ROPE_ASSIGN_OR_RETURN(config.engine, EngineLimitsFromFlags());
  ROPE_ASSIGN_OR_RETURN(config.lifecycle, LifecycleFromFlags());
  ROPE_RETURN_IF_ERROR(ApplyServerOptions(&config));
  config.default_thread_counts =
      absl::GetFlag(FLAGS_work_threads) <= 0 || absl::GetFlag(FLAGS_cpu_threads) <= 0;
  return config;
}

bool IsServerFlag(const absl::CommandLineFlag& flag) {
  return absl::EndsWith(flag.Filename(), "server/server_flags.cc");
}

}  // namespace rope
