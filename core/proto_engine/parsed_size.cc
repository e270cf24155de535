#include "core/proto_engine/parsed_size.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/message.h"
#include "google/protobuf/wire_format_lite.h"

namespace rope {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::io::CodedInputStream;
using WFL = google::protobuf::internal::WireFormatLite;

// What one heap allocation costs besides its payload (glibc's chunk header
// and alignment), and the objects protobuf 3.21 allocates, at their size on
// a 64-bit build rounded up.
constexpr int64_t kAllocation = 16;
constexpr int64_t kStringObject = 32 + kAllocation;
constexpr int64_t kPointerSlot = 2 * 8;          // RepeatedPtrField grows by doubling
constexpr int64_t kUnknownFieldRecord = 2 * 16;  // UnknownField in a doubling vector
constexpr int64_t kUnknownFieldSet = 64 + kAllocation;
constexpr int64_t kMapNode = 64 + kAllocation;  // hash node, bucket share, iterator links
constexpr int64_t kRepeatedHeader = 16 + kAllocation;
constexpr int64_t kRepeatedMinCapacity = 4;  // RepeatedField's first allocation
// An unknown group stores each field of its body as a record; the smallest
// field is two wire bytes.
constexpr int64_t kUnknownGroupBytesFactor = kUnknownFieldRecord / 2 + 1;

// sizeof the generated class of `type`, from its default instance (cached:
// the generated factory takes a lock per lookup).
int64_t ObjectSize(const Descriptor& type) {
  thread_local absl::flat_hash_map<const Descriptor*, int64_t> cache;
  auto it = cache.find(&type);
  if (it != cache.end()) return it->second;
  // A map entry is not kept as an object: its key and value live in the
  // map's node (kMapNode), charged as the entry's fields are walked. (Its
  // default instance cannot report its own size either.)
  if (type.options().map_entry()) return 0;
  const google::protobuf::Message* prototype =
      google::protobuf::MessageFactory::generated_factory()->GetPrototype(&type);
  // A type without a generated class (a dynamic descriptor): a generous
  // guess from its field count.
  const int64_t size = prototype != nullptr ? static_cast<int64_t>(prototype->SpaceUsedLong())
                                            : 64 + 16 * int64_t{type.field_count()};
  cache.emplace(&type, size + kAllocation);
  return size + kAllocation;
}

// The width of one element of a repeated numeric field in memory, or 0 for
// a field that is not numeric (string, bytes, message).
int64_t NumericWidth(const FieldDescriptor& field) {
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_FLOAT:
    case FieldDescriptor::CPPTYPE_ENUM:
      return 4;
    case FieldDescriptor::CPPTYPE_INT64:
    case FieldDescriptor::CPPTYPE_UINT64:
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return 8;
    case FieldDescriptor::CPPTYPE_BOOL:
      return 1;
    default:
      return 0;
  }
}

class Walker {
 public:
  Walker(CodedInputStream* in, const Descriptor& top, int max_depth)
      : in_(in), top_(top), max_depth_(max_depth) {}

  absl::StatusOr<int64_t> Run() {
    int64_t total = ObjectSize(top_);
    if (!Message(&top_, /*depth=*/0, /*group_number=*/0, &total)) return error_;
    return total;
  }

 private:
  // Elements of one repeated numeric field within one message instance.
  struct RepeatedCount {
    int number;
    int64_t width;
    int64_t elements;
  };

  bool Fail(absl::string_view what) {
    if (error_.ok()) {
      error_ = absl::InvalidArgumentError(absl::StrCat(
          "request is not a valid ", top_.full_name(), " message: ", what, " at byte ",
          in_->CurrentPosition()));
    }
    return false;
  }

  // Walks fields until the current limit (or the end group of
  // `group_number` when it is not 0), adding their cost to `*total`. A null
  // `type` (an unknown group's body) has no known fields.
  bool Message(const Descriptor* type, int depth, int group_number, int64_t* total) {
    if (depth > max_depth_) {
      return Fail(absl::StrCat("nesting deeper than ", max_depth_, " messages"));
    }
    absl::InlinedVector<RepeatedCount, 4> repeated;
    while (true) {
      const uint32_t tag = in_->ReadTag();
      if (tag == 0) {
        // End of input or of the current limit; inside a group it must end
        // with its end tag instead.
        if (group_number != 0) return Fail("a group without its end");
        if (!in_->ConsumedEntireMessage()) return Fail("an invalid field tag");
        break;
      }
      const int number = static_cast<int>(WFL::GetTagFieldNumber(tag));
      const WFL::WireType wire_type = WFL::GetTagWireType(tag);
      if (wire_type == WFL::WIRETYPE_END_GROUP) {
        if (number != group_number) return Fail("an unmatched end-group tag");
        break;
      }
      const FieldDescriptor* field = type != nullptr ? type->FindFieldByNumber(number) : nullptr;
      if (!Field(field, tag, depth, total, &repeated)) return false;
    }
    for (const RepeatedCount& r : repeated) {
      *total += kRepeatedHeader +
                r.width * std::max(kRepeatedMinCapacity, 2 * r.elements);
    }
    return true;
  }

  bool Field(const FieldDescriptor* field, uint32_t tag, int depth, int64_t* total,
             absl::InlinedVector<RepeatedCount, 4>* repeated) {
    const WFL::WireType wire_type = WFL::GetTagWireType(tag);
    if (field == nullptr) return Unknown(tag, depth, total);
    const int64_t width = NumericWidth(*field);
    if (width > 0) {
      const WFL::WireType element_type = WFL::WireTypeForFieldType(
          static_cast<WFL::FieldType>(field->type()));
      if (field->is_repeated() && wire_type == WFL::WIRETYPE_LENGTH_DELIMITED) {
        int64_t elements = 0;
        if (!PackedElements(element_type, &elements)) return false;
        Count(field->number(), width, elements, repeated);
        return true;
      }
      // The parser keeps a value of the wrong wire type as an unknown field.
      if (wire_type != element_type) return Unknown(tag, depth, total);
      if (!WFL::SkipField(in_, tag)) return Fail("a truncated number");
      if (field->is_repeated()) Count(field->number(), width, 1, repeated);
      return true;
    }
    if (wire_type != WFL::WIRETYPE_LENGTH_DELIMITED) return Unknown(tag, depth, total);
    uint32_t length = 0;
    if (!ReadLength(&length)) return false;
    if (field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
      // string / bytes: a string object, its bytes (one allocation beyond the
      // small-string buffer), a pointer slot when repeated.
      if (!in_->Skip(static_cast<int>(length))) return Fail("a string past the end");
      *total += kStringObject + length + 1 + kAllocation +
                (field->is_repeated() ? kPointerSlot : 0);
      return true;
    }
    *total += ObjectSize(*field->message_type()) + (field->is_repeated() ? kPointerSlot : 0) +
              (field->is_map() ? kMapNode : 0);
    const int start = in_->CurrentPosition();
    const CodedInputStream::Limit limit = in_->PushLimit(static_cast<int>(length));
    if (!Message(field->message_type(), depth + 1, /*group_number=*/0, total)) return false;
    in_->PopLimit(limit);
    // The input's end inside the message reads as its legitimate end.
    if (in_->CurrentPosition() - start != static_cast<int64_t>(length)) {
      return Fail("a message past the end");
    }
    return true;
  }

  // Elements in a packed run of `element_type` values, the run consumed.
  bool PackedElements(WFL::WireType element_type, int64_t* elements) {
    uint32_t length = 0;
    if (!ReadLength(&length)) return false;
    int64_t left = length;
    switch (element_type) {
      case WFL::WIRETYPE_FIXED32:
      case WFL::WIRETYPE_FIXED64: {
        const int64_t size = element_type == WFL::WIRETYPE_FIXED32 ? 4 : 8;
        if (left % size != 0) return Fail("a packed run of fixed-size values cut short");
        *elements = left / size;
        if (!in_->Skip(static_cast<int>(left))) return Fail("a packed run past the end");
        return true;
      }
      case WFL::WIRETYPE_VARINT: {
        // One element per byte without the continuation bit.
        uint8_t last = 0;
        while (left > 0) {
          const void* data = nullptr;
          int size = 0;
          if (!in_->GetDirectBufferPointer(&data, &size) || size <= 0) {
            return Fail("a packed run past the end");
          }
          const int take = static_cast<int>(std::min<int64_t>(size, left));
          const auto* bytes = static_cast<const uint8_t*>(data);
          for (int i = 0; i < take; ++i) *elements += (bytes[i] & 0x80) == 0;
          last = bytes[take - 1];
          in_->Skip(take);
          left -= take;
        }
        if ((last & 0x80) != 0) return Fail("a packed varint cut short");
        return true;
      }
      default:
        return Fail("a packed run of a non-numeric type");
    }
  }

  // A length-delimited field's length, at most what an int holds (as the
  // parser requires).
  bool ReadLength(uint32_t* length) {
    if (!in_->ReadVarint32(length)) return Fail("a truncated length");
    if (*length > static_cast<uint32_t>(INT32_MAX)) return Fail("a length over 2^31");
    return true;
  }

  static void Count(int number, int64_t width, int64_t elements,
                    absl::InlinedVector<RepeatedCount, 4>* repeated) {
    for (RepeatedCount& r : *repeated) {
      if (r.number == number) {
        r.elements += elements;
        return;
      }
    }
    repeated->push_back({number, width, elements});
  }

  // A field the message type does not have (or has with another wire
  // type): kept by the parser in the message's unknown-field set.
  bool Unknown(uint32_t tag, int depth, int64_t* total) {
    if (!unknown_set_counted_) {
      *total += kUnknownFieldSet;  // charged once per call: errs high for one message
      unknown_set_counted_ = true;
    }
    *total += kUnknownFieldRecord;
    switch (WFL::GetTagWireType(tag)) {
      case WFL::WIRETYPE_VARINT:
      case WFL::WIRETYPE_FIXED32:
      case WFL::WIRETYPE_FIXED64:
        if (!WFL::SkipField(in_, tag)) return Fail("a truncated unknown field");
        return true;
      case WFL::WIRETYPE_LENGTH_DELIMITED: {
        uint32_t length = 0;
        if (!ReadLength(&length)) return false;
        if (!in_->Skip(static_cast<int>(length))) return Fail("an unknown field past the end");
        *total += kStringObject + length + 1 + kAllocation;
        return true;
      }
      case WFL::WIRETYPE_START_GROUP: {
        if (depth + 1 > max_depth_) {
          return Fail(absl::StrCat("nesting deeper than ", max_depth_, " messages"));
        }
        const int before = in_->CurrentPosition();
        int64_t ignored = 0;
        // The group's fields are all unknown, each one record.
        if (!Message(/*type=*/nullptr, depth + 1,
                     static_cast<int>(WFL::GetTagFieldNumber(tag)), &ignored)) {
          return false;
        }
        *total += kUnknownFieldSet + kUnknownGroupBytesFactor * (in_->CurrentPosition() - before);
        return true;
      }
      default:
        return Fail("an invalid wire type");
    }
  }

  CodedInputStream* in_;
  const Descriptor& top_;
  const int max_depth_;
  bool unknown_set_counted_ = false;
  absl::Status error_;
};

}  // namespace

absl::StatusOr<int64_t> ParsedSizeBound(const Descriptor& type,
                                        google::protobuf::io::ZeroCopyInputStream* wire,
                                        int max_depth) {
  CodedInputStream in(wire);
  in.SetTotalBytesLimit(INT32_MAX);
  return Walker(&in, type, max_depth).Run();
}

absl::StatusOr<int64_t> ParsedSizeBound(const Descriptor& type, absl::string_view wire,
                                        int max_depth) {
  google::protobuf::io::ArrayInputStream stream(wire.data(), static_cast<int>(wire.size()));
  return ParsedSizeBound(type, &stream, max_depth);
}

}  // namespace rope
