#include "core/engine/bounded_json.h"

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace rope {

std::string TruncatedUtf8(absl::string_view text, size_t max) {
  if (text.size() <= max) return std::string(text);
  size_t end = max;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return absl::StrCat(text.substr(0, end), "... (", text.size(), " bytes)");
}

namespace {

using Json = nlohmann::json;

constexpr size_t kMaxShown = 64;  // bytes of a value quoted in a message

// nlohmann's DOM builder behind a SAX handler that counts nesting and polls
// the caller's interrupt. Not nlohmann's callback parser: after every closing
// brace it walks the parent container looking for values the callback
// discarded, so `[{},{},...]` took time quadratic in its length (4 MiB of
// `{}`: minutes of a work thread). This is one pass, linear in the text.
class BoundedDomBuilder {
 public:
  using number_integer_t = Json::number_integer_t;
  using number_unsigned_t = Json::number_unsigned_t;
  using number_float_t = Json::number_float_t;
  using string_t = Json::string_t;
  using binary_t = Json::binary_t;

  BoundedDomBuilder(Json& root, const Interrupt* interrupt)
      : dom_(root, /*allow_exceptions_=*/false), interrupt_(interrupt) {}

  bool null() { return Tick() && dom_.null(); }
  bool boolean(bool value) { return Tick() && dom_.boolean(value); }
  bool number_integer(number_integer_t value) { return Tick() && dom_.number_integer(value); }
  bool number_unsigned(number_unsigned_t value) { return Tick() && dom_.number_unsigned(value); }
  bool number_float(number_float_t value, const string_t& text) {
    return Tick() && dom_.number_float(value, text);
  }
  bool string(string_t& value) { return Tick() && dom_.string(value); }
  bool binary(binary_t& value) { return Tick() && dom_.binary(value); }
  bool key(string_t& value) { return Tick() && dom_.key(value); }
  bool start_object(std::size_t size) { return Enter() && dom_.start_object(size); }
  bool end_object() {
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t size) { return Enter() && dom_.start_array(size); }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  bool parse_error(std::size_t /*position*/, const std::string& /*token*/,
                   const nlohmann::detail::exception& error) {
    status_ = absl::InvalidArgumentError(
        absl::StrCat("hf_config_json is not valid JSON: ", TruncatedUtf8(error.what(), 240)));
    return false;
  }

  // Why parsing stopped early; OK when it did not.
  const absl::Status& status() const { return status_; }

 private:
  // The top-level object is level 1; kMaxJsonDepth levels are accepted.
  bool Enter() {
    if (++depth_ > kMaxJsonDepth) {
      status_ = absl::InvalidArgumentError(absl::StrCat(
          "hf_config_json nests objects and arrays deeper than ", kMaxJsonDepth, " levels"));
      return false;
    }
    return Tick();
  }

  // Polls the interrupt every kEventsPerCheck values (a few microseconds of
  // parsing), so a cancelled or late call stops within that.
  bool Tick() {
    static constexpr int64_t kEventsPerCheck = 4096;
    if (interrupt_ == nullptr || ++events_ % kEventsPerCheck != 0) return true;
    status_ = interrupt_->Check("parsing hf_config_json");
    return status_.ok();
  }

  nlohmann::detail::json_sax_dom_parser<Json> dom_;
  const Interrupt* const interrupt_;
  int depth_ = 0;
  int64_t events_ = 0;
  absl::Status status_;
};

}  // namespace

absl::StatusOr<nlohmann::json> ParseConfigJson(absl::string_view text,
                                               const Interrupt* interrupt) {
  Json root;
  BoundedDomBuilder builder(root, interrupt);
  bool parsed = false;
  // The SAX parser reports malformed input through parse_error; anything it
  // still throws is caught here and never leaves.
  try {
    parsed = Json::sax_parse(text.begin(), text.end(), &builder);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("hf_config_json is not valid JSON: ", TruncatedUtf8(e.what(), 240)));
  }
  if (!builder.status().ok()) return builder.status();
  if (!parsed) return absl::InvalidArgumentError("hf_config_json is not valid JSON");
  if (!root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hf_config_json is ", TruncatedUtf8(root.dump(), kMaxShown),
        ": must be a JSON object (a model's config.json)"));
  }
  return root;
}

}  // namespace rope
