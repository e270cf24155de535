// Why a listening address could not be bound, found after gRPC failed to
// bind it: gRPC's builder says only that it failed (and logs a raw line), so
// ropeserve tries the same bind itself, on a socket it closes at once, and
// names the kernel's answer and the fix.
#ifndef ROPE_SERVER_SERVICE_BIND_DIAGNOSIS_H_
#define ROPE_SERVER_SERVICE_BIND_DIAGNOSIS_H_

#include <string>

namespace rope {

// For "host:port" (IPv6 as "[::1]:port"): "127.0.0.1:50051 is in use by
// another process (...)", "10.9.9.9 is not an address of this host", "port
// 80 needs root or CAP_NET_BIND_SERVICE", "the host name \"x\" does not
// resolve: ...". `reuse_port` binds as --reuse_port does. "" when a probe
// binds fine (the failure was elsewhere).
std::string DiagnoseTcpBind(const std::string& host_port, bool reuse_port);

// For a Unix socket path: its directory missing or not writable, the path
// taken by something that is not a socket, ... "" when nothing is found.
std::string DiagnoseUnixBind(const std::string& path);

}  // namespace rope

#endif  // ROPE_SERVER_SERVICE_BIND_DIAGNOSIS_H_
