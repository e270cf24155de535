// ReplyWriter: a raw method's successful reply that writes its own wire
// bytes instead of being built as a message and serialized (which copies
// every byte of it once more). Used by raw unary calls (unary_call.h
// UnaryWork::reply) and raw streams (admitted_stream.h) in place of their
// reply message.
//
// Its exact size is known before any byte is made, so that the reply limit
// is checked (and the call refused) before the bytes exist; WriteReply then
// hands its bytes to gRPC. Not thread-safe; one call's.
#ifndef ROPE_SERVICE_REPLY_WRITER_H_
#define ROPE_SERVICE_REPLY_WRITER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "grpcpp/support/byte_buffer.h"

namespace rope {

class ReplyWriter {
 public:
  virtual ~ReplyWriter() = default;

  // The size of the reply's wire bytes, exactly as WriteReply writes them.
  virtual int64_t ReplyBytes() const = 0;

  // Replaces `wire`'s contents with the reply's bytes, moving the reply's
  // buffers into it where it can: afterwards the writer holds no reply.
  // INTERNAL when the reply cannot be one protobuf message (2 GiB or more),
  // as serializing its message would be.
  virtual absl::Status WriteReply(grpc::ByteBuffer* wire) = 0;
};

}  // namespace rope

#endif  // ROPE_SERVICE_REPLY_WRITER_H_
