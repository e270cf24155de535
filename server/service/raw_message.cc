#include "server/service/raw_message.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "core/proto_engine/parsed_size.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/support/proto_buffer_reader.h"

namespace rope {

absl::StatusOr<int64_t> ParsedBoundOf(const google::protobuf::Descriptor& type,
                                      const grpc::ByteBuffer& wire) {
  // gRPC hands an empty message as a buffer that may not be valid (nothing
  // to read).
  if (!wire.Valid()) return ParsedSizeBound(type, absl::string_view());
  // A second handle on the same slices (no copy): the reader needs a
  // mutable buffer, gRPC hands out a const one.
  grpc::ByteBuffer handle(wire);
  grpc::ProtoBufferReader reader(&handle);
  absl::StatusOr<int64_t> bound = ParsedSizeBound(type, &reader);
  if (bound.ok() && !reader.status().ok()) {
    return absl::InvalidArgumentError(absl::StrCat("request is not a valid ", type.full_name(),
                                                   " message: ", reader.status().error_message()));
  }
  return bound;
}

bool ParseWire(const grpc::ByteBuffer& wire, google::protobuf::Message* message) {
  if (!wire.Valid()) return message->ParseFromString("");
  grpc::ByteBuffer handle(wire);
  grpc::ProtoBufferReader reader(&handle);
  return message->ParseFromZeroCopyStream(&reader) && reader.status().ok();
}

absl::Status NotParsedError(const google::protobuf::Descriptor& type, int64_t wire_bytes) {
  return absl::InvalidArgumentError(absl::StrCat("request is not a valid ", type.full_name(),
                                                 " message: its ", wire_bytes,
                                                 " bytes do not parse"));
}

std::string CopyWire(const grpc::ByteBuffer& wire) {
  std::string copy;
  std::vector<grpc::Slice> slices;
  if (wire.Valid() && wire.Dump(&slices).ok()) {
    copy.reserve(wire.Length());
    for (const grpc::Slice& slice : slices) {
      copy.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
  }
  return copy;
}

absl::Status SerializeReply(const google::protobuf::Message& reply, absl::string_view what,
                            grpc::ByteBuffer* wire) {
  bool own_buffer = false;
  const grpc::Status serialized =
      grpc::SerializationTraits<google::protobuf::Message>::Serialize(reply, wire, &own_buffer);
  if (serialized.ok()) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, " did not serialize: ", serialized.error_message()));
}

}  // namespace rope
