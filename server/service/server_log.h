// ropeserve's log: one stream, in order, without gRPC's own lines unless asked.
//
// Every line ropeserve prints while it runs (start-up, refusals, reloads,
// drain) goes to stderr, the one stream a redirect or a container runtime
// collects in order; gRPC's own log lines (a failed bind's chttp2_server.cc
// line, handshake errors) are dropped unless --grpc_verbosity (or gRPC's
// GRPC_VERBOSITY / GRPC_TRACE environment) asks for them, because ropeserve
// reports what matters itself, naming the cause.
#ifndef ROPE_SERVER_SERVICE_SERVER_LOG_H_
#define ROPE_SERVER_SERVICE_SERVER_LOG_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace rope {

// Points stdout at stderr (line-buffered), so that whatever part of the
// server prints to either lands in one ordered stream; and routes gRPC's
// log: `grpc_verbosity` "" drops its lines (unless GRPC_VERBOSITY or
// GRPC_TRACE is set, which leaves gRPC's own settings alone), "debug",
// "info" or "error" passes its lines of that severity and above, prefixed
// "ropeserve: grpc: ". INVALID_ARGUMENT naming the flag for another value.
// Call once, before the first gRPC object.
absl::Status SetUpServerLog(absl::string_view grpc_verbosity);

}  // namespace rope

#endif  // ROPE_SERVER_SERVICE_SERVER_LOG_H_
