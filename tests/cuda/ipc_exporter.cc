#include "tests/cuda/ipc_exporter.h"

#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace rope {
namespace test {
namespace {

using Clock = std::chrono::steady_clock;

// The child's environment variable: the descriptor of its end of the socket.
constexpr char kEnvironment[] = "ROPE_IPC_EXPORTER";
constexpr char kChildTest[] = "IpcExporterChild.ExportsUntilToldToStop";

// A reply (the child's first includes starting the binary and CUDA).
constexpr auto kReplyTimeout = std::chrono::seconds(60);
// The child's exit once its socket is closed, before SIGKILL.
constexpr auto kExitTimeout = std::chrono::seconds(30);
// The child's wait for the next request.
constexpr auto kChildIdleLimit = std::chrono::minutes(10);

// Messages, both ways: a kind byte, an int64 length, that many bytes.
enum Kind : char {
  kStart = 'S',     // to the child: int32 device, then the contents
  kReadBack = 'R',  // to the child: send the allocation's bytes
  kQuit = 'Q',      // to the child: cudaFree and exit
  kHandle = 'H',    // from the child: the 64-byte handle
  kData = 'D',      // from the child: the allocation's bytes
  kBye = 'B',       // from the child: freed, exiting
  kError = 'E',     // from the child: what failed (it then exits)
};

constexpr int64_t kMaxMessage = int64_t{1} << 36;

struct Message {
  char kind = 0;
  std::string payload;
};

// Waits until `fd` is ready for `events`, at most until `deadline`.
absl::Status WaitFor(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return absl::DeadlineExceededError("IpcExporter: the other side did not answer");
    pollfd p = {fd, events, 0};
    const int ready = poll(&p, 1, static_cast<int>(left));
    if (ready > 0) return absl::OkStatus();
    if (ready < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("IpcExporter: poll: ", std::strerror(errno)));
    }
  }
}

absl::Status SendAll(int fd, const char* data, size_t size, Clock::time_point deadline) {
  while (size > 0) {
    if (absl::Status ready = WaitFor(fd, POLLOUT, deadline); !ready.ok()) return ready;
    const ssize_t sent = send(fd, data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (sent < 0) {
      return absl::UnavailableError(absl::StrCat("IpcExporter: send: ", std::strerror(errno)));
    }
    data += sent;
    size -= static_cast<size_t>(sent);
  }
  return absl::OkStatus();
}

// UNAVAILABLE at the end of the stream (the other side went away).
absl::Status ReceiveAll(int fd, char* data, size_t size, Clock::time_point deadline) {
  while (size > 0) {
    if (absl::Status ready = WaitFor(fd, POLLIN, deadline); !ready.ok()) return ready;
    const ssize_t got = recv(fd, data, size, MSG_DONTWAIT);
    if (got < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (got < 0) {
      return absl::UnavailableError(absl::StrCat("IpcExporter: recv: ", std::strerror(errno)));
    }
    if (got == 0) return absl::UnavailableError("IpcExporter: the other side went away");
    data += got;
    size -= static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

absl::Status Send(int fd, char kind, const std::string& payload, Clock::time_point deadline) {
  char header[1 + sizeof(int64_t)];
  header[0] = kind;
  const int64_t length = static_cast<int64_t>(payload.size());
  std::memcpy(header + 1, &length, sizeof(length));
  if (absl::Status sent = SendAll(fd, header, sizeof(header), deadline); !sent.ok()) return sent;
  return SendAll(fd, payload.data(), payload.size(), deadline);
}

absl::StatusOr<Message> Receive(int fd, Clock::time_point deadline) {
  char header[1 + sizeof(int64_t)];
  if (absl::Status got = ReceiveAll(fd, header, sizeof(header), deadline); !got.ok()) return got;
  int64_t length = 0;
  std::memcpy(&length, header + 1, sizeof(length));
  if (length < 0 || length > kMaxMessage) {
    return absl::InternalError(absl::StrCat("IpcExporter: a message of ", length, " bytes"));
  }
  Message message;
  message.kind = header[0];
  message.payload.resize(static_cast<size_t>(length));
  if (absl::Status got = ReceiveAll(fd, message.payload.data(), message.payload.size(), deadline);
      !got.ok()) {
    return got;
  }
  return message;
}

Clock::time_point In(Clock::duration duration) { return Clock::now() + duration; }

absl::Status CudaCheck(cudaError_t error, const char* call) {
  if (error == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();  // not left for the next call
  return absl::InternalError(absl::StrCat(call, ": ", cudaGetErrorName(error)));
}

// ---- The child ------------------------------------------------------------------

// Allocates, fills and exports; `*p` is the allocation (to free) even when
// a later step fails.
absl::Status Export(int device, const std::string& contents, void** p, std::string* handle) {
  if (absl::Status s = CudaCheck(cudaSetDevice(device), "cudaSetDevice"); !s.ok()) return s;
  if (absl::Status s = CudaCheck(cudaMalloc(p, contents.size()), "cudaMalloc"); !s.ok()) return s;
  if (absl::Status s = CudaCheck(
          cudaMemcpy(*p, contents.data(), contents.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
      !s.ok()) {
    return s;
  }
  cudaIpcMemHandle_t exported;
  if (absl::Status s = CudaCheck(cudaIpcGetMemHandle(&exported, *p), "cudaIpcGetMemHandle");
      !s.ok()) {
    return s;
  }
  handle->assign(reinterpret_cast<const char*>(&exported), sizeof(exported));
  return absl::OkStatus();
}

// Serves requests until told to quit (OK once freed), until the parent
// goes away (OK), or until none comes in kChildIdleLimit.
absl::Status ServeRequests(int fd, void* p, size_t size) {
  for (;;) {
    const absl::StatusOr<Message> request = Receive(fd, In(kChildIdleLimit));
    if (!request.ok() || request->kind == kQuit) {
      const absl::Status freed = CudaCheck(cudaFree(p), "cudaFree");
      if (request.ok()) {
        Send(fd, freed.ok() ? kBye : kError, std::string(freed.message()), In(kReplyTimeout))
            .IgnoreError();
      }
      if (!request.ok() && !absl::IsUnavailable(request.status())) return request.status();
      return freed;
    }
    if (request->kind != kReadBack) {
      return absl::InternalError(
          absl::StrCat("IpcExporter child: request '", std::string(1, request->kind), "'"));
    }
    std::string bytes(size, '\0');
    const absl::Status copied =
        CudaCheck(cudaMemcpy(bytes.data(), p, size, cudaMemcpyDeviceToHost), "cudaMemcpy");
    const absl::Status sent =
        copied.ok() ? Send(fd, kData, bytes, In(kReplyTimeout))
                    : Send(fd, kError, std::string(copied.message()), In(kReplyTimeout));
    if (!sent.ok()) return sent;
  }
}

absl::Status ServeExport(int fd) {
  const absl::StatusOr<Message> start = Receive(fd, In(kReplyTimeout));
  if (!start.ok()) return start.status();
  int32_t device = 0;
  if (start->kind != kStart || start->payload.size() < sizeof(device)) {
    return absl::InternalError("IpcExporter child: no start message");
  }
  std::memcpy(&device, start->payload.data(), sizeof(device));
  const std::string contents = start->payload.substr(sizeof(device));
  void* p = nullptr;
  std::string handle;
  const absl::Status exported = Export(device, contents, &p, &handle);
  if (!exported.ok()) {
    if (p != nullptr) cudaFree(p);
    Send(fd, kError, std::string(exported.message()), In(kReplyTimeout)).IgnoreError();
    return exported;
  }
  if (absl::Status sent = Send(fd, kHandle, handle, In(kReplyTimeout)); !sent.ok()) {
    cudaFree(p);
    return sent;
  }
  return ServeRequests(fd, p, contents.size());
}

}  // namespace

// The child's side: runs only in a process started by IpcExporter::Start.
TEST(IpcExporterChild, ExportsUntilToldToStop) {
  const char* fd = std::getenv(kEnvironment);
  if (fd == nullptr) {
    GTEST_SKIP() << "the exporting child of IpcExporter::Start (tests/cuda/ipc_exporter.h); "
                    "runs only as that";
  }
  const int socket = std::atoi(fd);
  const absl::Status served = ServeExport(socket);
  close(socket);
  EXPECT_TRUE(served.ok()) << served;
}

// ---- The parent -------------------------------------------------------------------

IpcExporter::IpcExporter(pid_t pid, int socket, int64_t byte_size, int device)
    : pid_(pid), socket_(socket), byte_size_(byte_size), device_(device) {}

absl::StatusOr<std::unique_ptr<IpcExporter>> IpcExporter::Start(
    const std::vector<uint8_t>& contents, int device) {
  if (contents.empty()) return absl::InvalidArgumentError("IpcExporter: no contents to export");
  char exe[4096];
  const ssize_t length = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (length <= 0) return absl::InternalError("IpcExporter: cannot read /proc/self/exe");
  exe[length] = '\0';
  int sockets[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets) != 0) {
    return absl::InternalError(absl::StrCat("IpcExporter: socketpair: ", std::strerror(errno)));
  }
  const int child_end = sockets[1];

  std::vector<std::string> args = {exe, absl::StrCat("--gtest_filter=", kChildTest)};
  std::vector<std::string> environment;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string variable = *e;
    if (variable.rfind("GTEST_", 0) == 0 || variable.rfind(kEnvironment, 0) == 0) continue;
    environment.push_back(variable);
  }
  environment.push_back(absl::StrCat(kEnvironment, "=", child_end));
  std::vector<char*> argv, envp;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& e : environment) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // dup2 onto itself clears FD_CLOEXEC in the child (glibc >= 2.29).
  posix_spawn_file_actions_adddup2(&actions, child_end, child_end);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, exe, &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(child_end);
  if (spawned != 0) {
    close(sockets[0]);
    return absl::InternalError(
        absl::StrCat("IpcExporter: posix_spawn ", exe, ": ", std::strerror(spawned)));
  }
  std::unique_ptr<IpcExporter> exporter(
      new IpcExporter(pid, sockets[0], static_cast<int64_t>(contents.size()), device));

  std::string start(sizeof(int32_t), '\0');
  const int32_t device32 = device;
  std::memcpy(start.data(), &device32, sizeof(device32));
  start.append(contents.begin(), contents.end());
  absl::StatusOr<Message> reply = absl::UnknownError("not sent");
  if (absl::Status sent = Send(exporter->socket_, kStart, start, In(kReplyTimeout)); sent.ok()) {
    reply = Receive(exporter->socket_, In(kReplyTimeout));
  } else {
    reply = sent;
  }
  if (reply.ok() && reply->kind == kHandle && reply->payload.size() == sizeof(cudaIpcMemHandle_t)) {
    exporter->handle_ = std::move(reply->payload);
    return exporter;
  }
  absl::Status status;
  if (!reply.ok()) {
    status = reply.status();
  } else if (reply->kind == kError) {
    status = absl::InternalError(absl::StrCat("IpcExporter child: ", reply->payload));
  } else {
    status = absl::InternalError("IpcExporter: the child sent no handle");
  }
  exporter->stopped_ = true;
  const absl::Status exited = exporter->Reap();
  return absl::Status(status.code(), absl::StrCat(status.message(), " (", exited.ToString(), ")"));
}

IpcExporter::~IpcExporter() {
  const absl::Status stopped = Stop();
  if (!stopped.ok()) std::fprintf(stderr, "IpcExporter: %s\n", stopped.ToString().c_str());
}

absl::StatusOr<std::vector<uint8_t>> IpcExporter::ReadBack() {
  if (stopped_) return absl::FailedPreconditionError("IpcExporter: stopped");
  const absl::Status sent = Send(socket_, kReadBack, "", In(kReplyTimeout));
  if (!sent.ok()) return sent;
  absl::StatusOr<Message> reply = Receive(socket_, In(kReplyTimeout));
  if (!reply.ok()) return reply.status();
  if (reply->kind == kError) {
    return absl::InternalError(absl::StrCat("IpcExporter child: ", reply->payload));
  }
  if (reply->kind != kData || static_cast<int64_t>(reply->payload.size()) != byte_size_) {
    return absl::InternalError("IpcExporter: the child's read-back is not the allocation");
  }
  return std::vector<uint8_t>(reply->payload.begin(), reply->payload.end());
}

absl::Status IpcExporter::Stop() {
  if (stopped_) return stop_status_;
  stopped_ = true;
  absl::Status told = Send(socket_, kQuit, "", In(kReplyTimeout));
  if (told.ok()) {
    const absl::StatusOr<Message> reply = Receive(socket_, In(kReplyTimeout));
    if (!reply.ok()) {
      told = reply.status();
    } else if (reply->kind != kBye) {
      told = absl::InternalError(absl::StrCat("IpcExporter child: ", reply->payload));
    }
  }
  const absl::Status exited = Reap();
  stop_status_ = exited;
  if (!told.ok()) {
    stop_status_ =
        absl::Status(told.code(), absl::StrCat(told.message(), " (", exited.ToString(), ")"));
  }
  return stop_status_;
}

absl::Status IpcExporter::Reap() {
  if (socket_ >= 0) close(socket_);  // the child sees the end and exits
  socket_ = -1;
  const Clock::time_point deadline = In(kExitTimeout);
  int status = 0;
  pid_t reaped = 0;
  while ((reaped = waitpid(pid_, &status, WNOHANG)) == 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (reaped == 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
    return absl::DeadlineExceededError("IpcExporter: the child did not exit; killed it");
  }
  if (reaped < 0) {
    return absl::InternalError(absl::StrCat("IpcExporter: waitpid: ", std::strerror(errno)));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return absl::OkStatus();
  return absl::InternalError(
      WIFEXITED(status) ? absl::StrCat("IpcExporter: the child exited with ", WEXITSTATUS(status))
                        : absl::StrCat("IpcExporter: the child died of signal ", WTERMSIG(status)));
}

}  // namespace test
}  // namespace rope
