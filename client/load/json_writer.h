// JsonWriter: builds a JSON document by appending values in order, with
// string escaping and finite numbers (NaN and infinities become null).
// Pretty-printed with two-space indents.
//
// Thread-compatible. The caller nests Begin/End calls correctly; the writer
// tracks only where commas go.
#ifndef ROPE_CLIENT_LOAD_JSON_WRITER_H_
#define ROPE_CLIENT_LOAD_JSON_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace rope {
namespace load {

class JsonWriter {
 public:
  // Inside an object: Key() then one value (or Begin*).
  JsonWriter& Key(absl::string_view key);
  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  JsonWriter& String(absl::string_view value);
  JsonWriter& Int(int64_t value);
  JsonWriter& Double(double value);
  JsonWriter& Bool(bool value);
  JsonWriter& Null();

  // Shorthands for Key(k).Value(v).
  JsonWriter& Field(absl::string_view key, absl::string_view value) { return Key(key).String(value); }
  JsonWriter& Field(absl::string_view key, const char* value) { return Key(key).String(value); }
  JsonWriter& Field(absl::string_view key, int64_t value) { return Key(key).Int(value); }
  JsonWriter& Field(absl::string_view key, int value) { return Key(key).Int(value); }
  JsonWriter& Field(absl::string_view key, double value) { return Key(key).Double(value); }
  JsonWriter& Field(absl::string_view key, bool value) { return Key(key).Bool(value); }

  const std::string& str() const { return out_; }

 private:
  void BeforeValue();
  void Newline();

  std::string out_;
  std::vector<bool> first_;  // per open container: no element yet
  bool after_key_ = false;
};

// `text` as a JSON string literal, quotes included.
std::string JsonQuote(absl::string_view text);

}  // namespace load
}  // namespace rope

#endif  // ROPE_CLIENT_LOAD_JSON_WRITER_H_
