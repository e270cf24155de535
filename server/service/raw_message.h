// A message that gRPC hands over as its wire bytes (a method registered
// raw): what parsing it allocates, the parse itself, and the reply's
// serialization. Shared by raw unary calls (unary_call.h) and raw streams
// (admitted_stream.h), which charge the parse before running it.
#ifndef ROPE_SERVICE_RAW_MESSAGE_H_
#define ROPE_SERVICE_RAW_MESSAGE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "grpcpp/support/byte_buffer.h"

namespace rope {

// ParsedSizeBound (core/proto_engine/parsed_size.h) of a `type` message's
// wire bytes, read without parsing them. Malformed bytes:
// INVALID_ARGUMENT "request is not a valid <type> message: ...".
absl::StatusOr<int64_t> ParsedBoundOf(const google::protobuf::Descriptor& type,
                                      const grpc::ByteBuffer& wire);

// Parses `wire` (the whole message) into `message`; false when it does not
// parse (e.g. a string that is not UTF-8).
bool ParseWire(const grpc::ByteBuffer& wire, google::protobuf::Message* message);

// The INVALID_ARGUMENT of `wire_bytes` bytes that did not parse as a
// `type` message.
absl::Status NotParsedError(const google::protobuf::Descriptor& type, int64_t wire_bytes);

// A copy of `wire`'s bytes in one string (for a message that must wait
// before its parse: gRPC's buffers are counted by its resource quota, which
// reclaims them under pressure by resetting calls).
std::string CopyWire(const grpc::ByteBuffer& wire);

// Serializes `reply` into `wire` (one slice: its size cached by a
// ByteSizeLong just before). INTERNAL naming `what` when it fails.
absl::Status SerializeReply(const google::protobuf::Message& reply, absl::string_view what,
                            grpc::ByteBuffer* wire);

}  // namespace rope

#endif  // ROPE_SERVICE_RAW_MESSAGE_H_
