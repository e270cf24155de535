// ropeserve: the RoPE gRPC server.
//
// Parses flags into a ServerConfig (server_config.h: every flag is defined
// and checked there), creates the backend, starts a RopeServer, and waits for SIGTERM,
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
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "core/backends/cpu/cpu_backend.h"
#include "core/backends/cpu/cpu_simd.h"
#include "core/backends/cuda/cuda_backend.h"
#include "core/engine/engine.h"
#include "server/service/cpu_limit.h"
#include "server/service/listener_watch.h"
#include "server/service/malloc_settings.h"
#include "server/service/open_file_limit.h"
#include "server/server_config.h"
#include "server/service/rope_server.h"
#include "server/service/server_log.h"
#include "server/service/server_security.h"


namespace rope {
namespace {

// --backend=auto takes the CUDA backend when cudaGetDeviceCount finds a
// device (and the backend starts), else the CPU, and says which and why;
// --backend=cuda without a usable device is an error, not a silent downgrade.
absl::StatusOr<std::unique_ptr<Backend>> MakeCpuBackend(const BackendConfig& config) {
  CpuBackendOptions options;
  options.threads = config.cpu_threads;
  options.simd = config.cpu_simd;
  options.simd_origin = config.cpu_simd_origin;
  return NewCpuBackend(options);
}

// Precondition: `config` came from ServerConfigFromFlags (choice checked).
absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const BackendConfig& config) {
  if (config.choice == "cpu") return MakeCpuBackend(config);
  CudaBackendOptions cuda_options;
  cuda_options.table_cache_bytes = config.table_cache_bytes;
  absl::StatusOr<std::unique_ptr<Backend>> cuda = NewCudaBackend(0, cuda_options);
  if (config.choice == "cuda") {
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
  return MakeCpuBackend(config);
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
  // All configuration first, checked whole: a bad flag or certificate must
  // not wait for (or disturb) a GPU being initialised.
  absl::StatusOr<ServerConfig> config = ServerConfigFromFlags();
  // One ordered log stream (stderr), gRPC's lines only when asked.
  absl::Status log_ok = SetUpServerLog(config.ok() ? config->grpc_verbosity : "");
  if (!config.ok()) return Fail(config.status(), kExitUsage);
  if (!log_ok.ok()) return Fail(log_ok, kExitUsage);
  const std::string malloc_line = SetUpMalloc();

  // Self-pipe: the handler only writes the signal number to a pipe, and a
  // thread reads it and drains. (Blocking the signals for a sigwait thread is
  // not enough: OpenBLAS starts threads before main, with the signals open.)
  absl::Status signals_ok = InstallStopSignalPipe();
  if (!signals_ok.ok()) return Fail(signals_ok, kExitRuntime);

  std::fprintf(stdout, "ropeserve: %s\n", DescribeOpenFileLimit(RaiseOpenFileLimit()).c_str());
  if (config->default_thread_counts) {
    std::fprintf(stdout, "ropeserve: %d CPUs to use (%s): the default thread counts\n",
                 ProcessCpus().cpus, ProcessCpus().source.c_str());
  }
  std::fprintf(stdout, "ropeserve: malloc: %s\n", malloc_line.c_str());
  std::fflush(stdout);
  absl::StatusOr<std::unique_ptr<Backend>> backend = MakeBackend(config->backend);
  if (!backend.ok()) return Fail(backend.status(), kExitRuntime);
  auto engine = std::make_unique<Engine>(*std::move(backend), config->engine);
  const BackendInfo info = engine->backend_info();
  std::printf("ropeserve: %s\n", config->inflight_line.c_str());
  const ServerOptions& options = config->server;

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
                config->metrics_host.c_str(), (*server)->metrics_port());
  }
  std::fflush(stdout);

  const absl::Duration grace = config->lifecycle.shutdown_grace_period;
  RopeServer* const serving = server->get();
  // Written by the watch's thread before it wakes the stopper through the
  // pipe, read by the stopper after: the pipe orders the two.
  std::string listener_failure;
  std::unique_ptr<ListenerWatch> listener_watch;
  if ((*server)->port() != 0 && config->lifecycle.listener_stuck_after > absl::ZeroDuration()) {
    ListenerWatch::Options watch;
    watch.port = (*server)->port();
    watch.stuck_after = config->lifecycle.listener_stuck_after;
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
  ArmTeardownWatchdog(config->lifecycle.teardown_timeout, exit_code);
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
    if (IsServerFlag(*flag)) flags.push_back(flag);
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
