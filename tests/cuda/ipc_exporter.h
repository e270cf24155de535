// IpcExporter: device memory exported over CUDA IPC by another process, for
// tests of the importing side (cudaIpcOpenMemHandle). The CUDA runtime
// refuses to open a handle in the process that exported it (the fake
// runtime of tests/cuda/fake_runtime does too), so the exporter is a child
// process; and a process must not fork once CUDA is initialised, so the
// child is this test binary again (/proc/self/exe, posix_spawn) running one
// test, IpcExporterChild.ExportsUntilToldToStop, defined in ipc_exporter.cc:
// a binary that calls IpcExporter::Start links that test with it, and it
// skips unless started by Start (ROPE_IPC_EXPORTER in its environment).
// Works the same on the fake runtime and on a GPU: the child uses whatever
// CUDA runtime the binary links.
//
// The child: cudaSetDevice(device), cudaMalloc(contents.size()), copies the
// contents in, cudaIpcGetMemHandle, sends the handle, then serves read-backs
// until told to stop (it then cudaFrees and exits), until this process goes
// away (end of the socket), or after 10 minutes without a request. The
// protocol runs over a socketpair (a bidirectional pipe; MSG_NOSIGNAL, so a
// dead peer is an error, not SIGPIPE); every wait on either side is bounded.
// The child's stdout (its gtest report) goes to /dev/null; its stderr is
// this process's. GTEST_* environment variables (sharding, XML output) are
// not passed on.
//
// Not thread-safe; one owner.
#ifndef ROPE_TESTS_CUDA_IPC_EXPORTER_H_
#define ROPE_TESTS_CUDA_IPC_EXPORTER_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rope {
namespace test {

class IpcExporter {
 public:
  // Starts the child and waits (bounded) for its handle. `contents` must not
  // be empty. INTERNAL naming the CUDA call when the child's fails (e.g.
  // "cudaIpcGetMemHandle: cudaErrorInvalidValue"), or when the child cannot
  // be started or exits early; DEADLINE_EXCEEDED when it does not answer.
  static absl::StatusOr<std::unique_ptr<IpcExporter>> Start(const std::vector<uint8_t>& contents,
                                                            int device = 0);

  // Stop(), reporting a failure to stderr.
  ~IpcExporter();
  IpcExporter(const IpcExporter&) = delete;
  IpcExporter& operator=(const IpcExporter&) = delete;

  // The cudaIpcMemHandle_t's 64 bytes.
  const std::string& handle() const { return handle_; }
  // The exported allocation's size: contents.size().
  int64_t byte_size() const { return byte_size_; }
  int device() const { return device_; }
  pid_t pid() const { return pid_; }

  // The child's allocation as it is now (the child cudaMemcpys it to the
  // host). FAILED_PRECONDITION after Stop().
  absl::StatusOr<std::vector<uint8_t>> ReadBack();

  // Tells the child to cudaFree and exit, and waits for it (bounded; then
  // SIGKILL). OK when the child freed the allocation and exited 0; the same
  // answer to every later call. Importers' open mappings stay valid on a
  // GPU until closed (on the fake too), but the handle can no longer be
  // opened.
  absl::Status Stop();

 private:
  IpcExporter(pid_t pid, int socket, int64_t byte_size, int device);
  // Closes the socket and waits for the child (bounded; then SIGKILL): OK
  // when it exited 0.
  absl::Status Reap();

  pid_t pid_;
  int socket_;  // -1 once stopped
  int64_t byte_size_;
  int device_;
  std::string handle_;
  bool stopped_ = false;
  absl::Status stop_status_;
};

}  // namespace test
}  // namespace rope

#endif  // ROPE_TESTS_CUDA_IPC_EXPORTER_H_
