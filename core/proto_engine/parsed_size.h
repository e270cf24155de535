// ParsedSizeBound: how much memory a protobuf message will take once
// parsed, computed from its wire bytes without parsing it.
//
// A request's wire size is not what it costs: a packed repeated int64 takes
// one byte per small element on the wire and eight once parsed (sixteen
// while the repeated field grows by doubling), and every submessage or
// string adds an object. A server that must charge a request's memory to its
// budget before spending it needs that figure before the parse; this is it.
//
// Contract:
// - The result is an upper bound on the heap bytes that
//   `Message::ParseFromZeroCopyStream` of the same bytes into a fresh
//   message of `type` allocates (protobuf 3.21's generated messages, no
//   arena): each message object at its generated size, each string or bytes
//   field at its length plus a string object, repeated fields at their
//   in-memory element width times their worst growth capacity, map entries
//   with a hash node each, unknown fields at their wire length plus a
//   record. It is meant to be charged, so it errs high, never low.
// - It reads the input once, front to back, allocating nothing per field
//   (cost linear in the wire size).
// - Malformed wire data (a truncated field, an invalid tag or wire type,
//   nesting deeper than `max_depth`, a length past the end) is
//   INVALID_ARGUMENT naming the message type and the byte offset; the parse
//   would fail on it too.
//
// Hand-written because protobuf has no size-before-parse API (ByteSizeLong
// is the wire size of a parsed message, SpaceUsedLong needs the parse).
#ifndef ROPE_PROTO_ENGINE_PARSED_SIZE_H_
#define ROPE_PROTO_ENGINE_PARSED_SIZE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/zero_copy_stream.h"

namespace rope {

// Protobuf's own default recursion limit.
inline constexpr int kParsedSizeMaxDepth = 100;

absl::StatusOr<int64_t> ParsedSizeBound(const google::protobuf::Descriptor& type,
                                        google::protobuf::io::ZeroCopyInputStream* wire,
                                        int max_depth = kParsedSizeMaxDepth);

// The same over one contiguous buffer.
absl::StatusOr<int64_t> ParsedSizeBound(const google::protobuf::Descriptor& type,
                                        absl::string_view wire,
                                        int max_depth = kParsedSizeMaxDepth);

}  // namespace rope

#endif  // ROPE_PROTO_ENGINE_PARSED_SIZE_H_
