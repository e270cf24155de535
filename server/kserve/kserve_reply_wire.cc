#include "server/kserve/kserve_reply_wire.h"

#include <array>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/support/slice.h"

namespace rope {
namespace kserve {
namespace {

using google::protobuf::io::CodedOutputStream;
using google::protobuf::internal::WireFormatLite;

// Field numbers of the published messages (grpc_service.proto).
constexpr int kStreamInferResponse = 2;  // ModelStreamInferResponse.infer_response
constexpr int kModelName = 1;            // ModelInferResponse
constexpr int kModelVersion = 2;
constexpr int kId = 3;
constexpr int kOutputs = 5;
constexpr int kRawOutputContents = 6;
constexpr int kOutputName = 1;  // InferOutputTensor
constexpr int kOutputDatatype = 2;
constexpr int kOutputShape = 3;
constexpr int kOutputParameters = 4;
constexpr int kMapKey = 1;  // a map entry
constexpr int kMapValue = 2;

// The bytes of a length-delimited field of `length` bytes, tag included.
size_t DelimitedFieldBytes(int field, size_t length) {
  return WireFormatLite::TagSize(field, WireFormatLite::TYPE_BYTES) +
         WireFormatLite::LengthDelimitedSize(length);
}

// A proto3 singular string: absent when empty.
size_t StringFieldBytes(int field, absl::string_view value) {
  return value.empty() ? 0 : DelimitedFieldBytes(field, value.size());
}

uint8_t* WriteDelimitedHeader(int field, size_t length, uint8_t* target) {
  target =
      WireFormatLite::WriteTagToArray(field, WireFormatLite::WIRETYPE_LENGTH_DELIMITED, target);
  return CodedOutputStream::WriteVarint32ToArray(static_cast<uint32_t>(length), target);
}

uint8_t* WriteBytesField(int field, absl::string_view value, uint8_t* target) {
  target = WriteDelimitedHeader(field, value.size(), target);
  if (!value.empty()) std::memcpy(target, value.data(), value.size());
  return target + value.size();
}

uint8_t* WriteStringField(int field, absl::string_view value, uint8_t* target) {
  return value.empty() ? target : WriteBytesField(field, value, target);
}

// A map<string, InferParameter> entry's payload: key and value, both always
// written (as the generated map serializer does). Caches the value's size
// (ByteSizeLong) for SerializeWithCachedSizesToArray.
size_t ParameterEntryBytes(const std::string& key, const inference::InferParameter& value) {
  return DelimitedFieldBytes(kMapKey, key.size()) +
         DelimitedFieldBytes(kMapValue, value.ByteSizeLong());
}

// The sizes of a reply's parts, computed once per reply.
struct ReplySizes {
  std::array<size_t, kMaxInferOutputs> shape_payload{};  // an output's packed shape (its varints)
  std::array<size_t, kMaxInferOutputs> output{};         // an InferOutputTensor's payload
  size_t response = 0;                                   // the ModelInferResponse
  size_t total = 0;  // the message written (either form)
};

ReplySizes SizesOf(const InferReply& reply, InferReplyWriter::Form form) {
  ReplySizes sizes;
  sizes.response = StringFieldBytes(kModelName, reply.model_name) +
                   StringFieldBytes(kModelVersion, reply.model_version) +
                   StringFieldBytes(kId, reply.id);
  for (int i = 0; i < reply.output_count; ++i) {
    const InferReply::Output& output = reply.outputs[i];
    size_t bytes = StringFieldBytes(kOutputName, output.name) +
                   StringFieldBytes(kOutputDatatype, output.datatype);
    if (!output.shape.empty()) {
      sizes.shape_payload[i] = WireFormatLite::Int64Size(output.shape);
      bytes += DelimitedFieldBytes(kOutputShape, sizes.shape_payload[i]);
    }
    for (const auto& [key, value] : output.parameters) {
      bytes += DelimitedFieldBytes(kOutputParameters, ParameterEntryBytes(key, value));
    }
    sizes.output[i] = bytes;
    sizes.response += DelimitedFieldBytes(kOutputs, bytes) +
                      DelimitedFieldBytes(kRawOutputContents, reply.raw[i].size());
  }
  sizes.total = form == InferReplyWriter::Form::kModelInferResponse
                    ? sizes.response
                    : DelimitedFieldBytes(kStreamInferResponse, sizes.response);
  return sizes;
}

// Writes output `i` (an outputs entry, tag included), its sizes from
// SizesOf.
uint8_t* WriteOutput(const InferReply::Output& output, const ReplySizes& sizes, int i,
                     uint8_t* target) {
  target = WriteDelimitedHeader(kOutputs, sizes.output[i], target);
  target = WriteStringField(kOutputName, output.name, target);
  target = WriteStringField(kOutputDatatype, output.datatype, target);
  if (!output.shape.empty()) {
    target = WriteDelimitedHeader(kOutputShape, sizes.shape_payload[i], target);
    for (const int64_t dim : output.shape) {
      target = WireFormatLite::WriteInt64NoTagToArray(dim, target);
    }
  }
  for (const auto& [key, value] : output.parameters) {
    target = WriteDelimitedHeader(kOutputParameters, ParameterEntryBytes(key, value), target);
    target = WriteBytesField(kMapKey, key, target);
    target = WriteDelimitedHeader(kMapValue, value.GetCachedSize(), target);
    target = value.SerializeWithCachedSizesToArray(target);
  }
  return target;
}

// A slice that owns `bytes`' buffer (freed with the slice's last reference).
grpc::Slice OwningSlice(std::string bytes) {
  auto* owned = new std::string(std::move(bytes));
  return grpc::Slice(
      owned->data(), owned->size(), [](void* held) { delete static_cast<std::string*>(held); },
      owned);
}

}  // namespace

int64_t InferReplyWriter::ReplyBytes() const {
  return static_cast<int64_t>(SizesOf(reply_, form_).total);
}

absl::Status InferReplyWriter::WriteReply(grpc::ByteBuffer* wire) {
  const ReplySizes sizes = SizesOf(reply_, form_);
  if (sizes.total > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InternalError(absl::StrCat("ModelInfer reply did not serialize: ", sizes.total,
                                            " bytes, over protobuf's 2 GiB message limit"));
  }
  size_t tensor_bytes = 0;
  for (int i = 0; i < reply_.output_count; ++i) tensor_bytes += reply_.raw[i].size();
  // Everything but the tensors' bytes, written into one slice; the slices
  // handed to gRPC alternate between pieces of it and the tensors.
  grpc::Slice head(sizes.total - tensor_bytes);
  uint8_t* const begin = const_cast<uint8_t*>(head.begin());
  uint8_t* target = begin;
  if (form_ == Form::kModelStreamInferResponse) {
    target = WriteDelimitedHeader(kStreamInferResponse, sizes.response, target);
  }
  target = WriteStringField(kModelName, reply_.model_name, target);
  target = WriteStringField(kModelVersion, reply_.model_version, target);
  target = WriteStringField(kId, reply_.id, target);
  for (int i = 0; i < reply_.output_count; ++i) {
    target = WriteOutput(reply_.outputs[i], sizes, i, target);
  }
  std::array<grpc::Slice, 1 + 2 * kMaxInferOutputs> slices;
  size_t slice_count = 0;
  uint8_t* piece_start = begin;
  for (int i = 0; i < reply_.output_count; ++i) {
    std::string& raw = reply_.raw[i];
    target = WriteDelimitedHeader(kRawOutputContents, raw.size(), target);
    if (raw.empty()) continue;
    slices[slice_count++] = head.sub(piece_start - begin, target - begin);
    slices[slice_count++] = OwningSlice(std::move(raw));
    raw = std::string();
    piece_start = target;
  }
  if (target != begin + head.size()) {
    return absl::InternalError(absl::StrCat("ModelInfer reply did not serialize: ",
                                            target - begin, " header bytes written of ",
                                            head.size()));
  }
  if (target != piece_start) slices[slice_count++] = head.sub(piece_start - begin, target - begin);
  grpc::ByteBuffer written(slices.data(), slice_count);
  wire->Swap(&written);
  return absl::OkStatus();
}

}  // namespace kserve
}  // namespace rope
