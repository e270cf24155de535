// InferReplyWriter: writes a successful ModelInfer's reply (an InferReply)
// as the wire bytes of the published ModelInferResponse, or of a
// ModelStreamInferResponse carrying it (error_message empty), without
// building the message: the fixed fields and tensor headers through
// protobuf's own wire-format primitives (WireFormatLite, CodedOutputStream)
// into one small slice, and each output tensor's bytes handed to gRPC as a
// slice of their own that owns the kernel's buffer (no copy after the
// kernel wrote them).
//
// The bytes parse, with the generated classes, to exactly the message
// ToResponse (kserve_reply.h) builds from the same reply; fields come in
// field-number order, as the generated serializer writes them.
#ifndef ROPE_SERVER_KSERVE_KSERVE_REPLY_WIRE_H_
#define ROPE_SERVER_KSERVE_KSERVE_REPLY_WIRE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "grpcpp/support/byte_buffer.h"
#include "server/kserve/kserve_reply.h"
#include "server/service/reply_writer.h"

namespace rope {
namespace kserve {

class InferReplyWriter final : public ReplyWriter {
 public:
  // Which message the bytes are.
  enum class Form { kModelInferResponse, kModelStreamInferResponse };

  explicit InferReplyWriter(Form form) : form_(form) {}

  // The reply to write: filled by RunModelInfer.
  InferReply* reply() { return &reply_; }

  int64_t ReplyBytes() const override;
  // Moves the reply's tensor bytes into `wire`; the rest of the reply is
  // left as it was.
  absl::Status WriteReply(grpc::ByteBuffer* wire) override;

 private:
  const Form form_;
  InferReply reply_;
};

}  // namespace kserve
}  // namespace rope

#endif  // ROPE_SERVER_KSERVE_KSERVE_REPLY_WIRE_H_
