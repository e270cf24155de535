#include "client/npy.h"

#include <cerrno>
#include <cstdio>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace rope {
namespace client {
namespace {

constexpr absl::string_view kMagic("\x93NUMPY", 6);
// Largest element count we accept from a header: keeps byte arithmetic far
// from overflow (a file that large could not be read into memory anyway).
constexpr int64_t kMaxElements = int64_t{1} << 40;

// A cursor over the header dict literal. Only the grammar NumPy writes:
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
class HeaderParser {
 public:
  HeaderParser(absl::string_view text, absl::string_view what) : text_(text), what_(what) {}

  absl::Status Parse(NpyArray* array) {
    bool have_descr = false, have_order = false, have_shape = false;
    std::string descr;
    bool fortran_order = false;
    if (!Consume('{')) return Error("header does not start with '{'");
    while (true) {
      SkipSpace();
      if (Consume('}')) break;
      std::string key;
      if (!ParseString(&key)) return Error("expected a quoted key in the header dict");
      SkipSpace();
      if (!Consume(':')) return Error(absl::StrCat("expected ':' after key '", key, "'"));
      SkipSpace();
      if (key == "descr") {
        if (!ParseString(&descr)) {
          return Error("'descr' is not a string: structured dtypes are not supported");
        }
        have_descr = true;
      } else if (key == "fortran_order") {
        if (!ParseBool(&fortran_order)) return Error("'fortran_order' is not True or False");
        have_order = true;
      } else if (key == "shape") {
        ROPE_RETURN_IF_ERROR(ParseShape(&array->shape));
        have_shape = true;
      } else {
        return Error(absl::StrCat("unexpected header key '", key, "'"));
      }
      SkipSpace();
      if (Consume(',')) continue;
      SkipSpace();
      if (Consume('}')) break;
      return Error("expected ',' or '}' in the header dict");
    }
    if (!have_descr || !have_order || !have_shape) {
      return Error("header lacks one of 'descr', 'fortran_order', 'shape'");
    }
    if (fortran_order) {
      return Error("fortran_order is True: only C-order arrays are supported "
                   "(save np.ascontiguousarray(a))");
    }
    if (descr == "<f4") {
      array->dtype = NpyDType::kFloat32;
    } else if (descr == "<f2") {
      array->dtype = NpyDType::kFloat16;
    } else if (descr == "<u2") {
      array->dtype = NpyDType::kUInt16;
    } else if (descr == "<f8") {
      array->dtype = NpyDType::kFloat64;
    } else if (descr == "<i2") {
      array->dtype = NpyDType::kInt16;
    } else if (descr == "<i4") {
      array->dtype = NpyDType::kInt32;
    } else if (!descr.empty() && descr[0] == '>') {
      return Error(absl::StrCat("dtype '", descr,
                                "' is big-endian: only little-endian arrays are supported"));
    } else {
      return Error(absl::StrCat("dtype '", descr,
                                "' is not supported: use '<f4' (float32), '<f2' (float16), "
                                "'<f8' (float64, converted), '<u2' / '<i2' (bfloat16 bits) or '<i4' (int32)"));
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Error(absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(what_, ": ", message));
  }

  void SkipSpace() {
    while (pos_ < text_.size() && absl::ascii_isspace(static_cast<unsigned char>(text_[pos_]))) {
      ++pos_;
    }
  }

  bool Consume(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  bool ConsumeWord(absl::string_view word) {
    if (text_.substr(pos_, word.size()) == word) {
      pos_ += word.size();
      return true;
    }
    return false;
  }

  // A Python string literal in single or double quotes, without escapes
  // (NumPy never writes escapes in keys or dtype strings).
  bool ParseString(std::string* out) {
    if (pos_ >= text_.size()) return false;
    const char quote = text_[pos_];
    if (quote != '\'' && quote != '"') return false;
    size_t end = text_.find(quote, pos_ + 1);
    if (end == absl::string_view::npos) return false;
    *out = std::string(text_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return true;
  }

  bool ParseBool(bool* out) {
    if (ConsumeWord("True")) {
      *out = true;
      return true;
    }
    if (ConsumeWord("False")) {
      *out = false;
      return true;
    }
    return false;
  }

  // (), (n,), (a, b, ...) with an optional trailing comma. NumPy may write
  // Python 2 long suffixes ("3L") in old files: accepted.
  absl::Status ParseShape(std::vector<int64_t>* shape) {
    shape->clear();
    if (!Consume('(')) return Error("'shape' is not a tuple");
    int64_t elements = 1;
    while (true) {
      SkipSpace();
      if (Consume(')')) break;
      size_t start = pos_;
      while (pos_ < text_.size() && absl::ascii_isdigit(static_cast<unsigned char>(text_[pos_]))) {
        ++pos_;
      }
      int64_t dim = 0;
      if (start == pos_ || !absl::SimpleAtoi(text_.substr(start, pos_ - start), &dim)) {
        return Error("'shape' holds something other than non-negative integers");
      }
      Consume('L');
      if (dim > 0 && elements > kMaxElements / dim) {
        return Error(absl::StrCat("'shape' has more than ", kMaxElements, " elements"));
      }
      elements *= dim;
      shape->push_back(dim);
      SkipSpace();
      if (Consume(',')) continue;
      SkipSpace();
      if (Consume(')')) break;
      return Error("expected ',' or ')' in 'shape'");
    }
    return absl::OkStatus();
  }

  absl::string_view text_;
  absl::string_view what_;
  size_t pos_ = 0;
};

uint32_t ReadLittleEndian(absl::string_view bytes, size_t offset, size_t width) {
  uint32_t v = 0;
  for (size_t i = 0; i < width; ++i) {
    v |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[offset + i])) << (8 * i);
  }
  return v;
}

void AppendLittleEndian(uint32_t v, size_t width, std::string* out) {
  for (size_t i = 0; i < width; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

absl::Status CheckPayload(const NpyArray& array, size_t payload_bytes, absl::string_view what) {
  for (int64_t d : array.shape) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat(what, ": negative dimension ", d));
  }
  const uint64_t expected =
      static_cast<uint64_t>(array.num_elements()) * NpyDTypeSize(array.dtype);
  if (payload_bytes != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": data is ", payload_bytes, " bytes but shape (",
        absl::StrJoin(array.shape, ", "), ") of ", NpyDTypeDescr(array.dtype), " needs ",
        expected));
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view NpyDTypeDescr(NpyDType dtype) {
  switch (dtype) {
    case NpyDType::kFloat32: return "<f4";
    case NpyDType::kFloat16: return "<f2";
    case NpyDType::kUInt16: return "<u2";
    case NpyDType::kFloat64: return "<f8";
    case NpyDType::kInt16: return "<i2";
    case NpyDType::kInt32: return "<i4";
  }
  return "?";
}

size_t NpyDTypeSize(NpyDType dtype) {
  switch (dtype) {
    case NpyDType::kFloat64: return 8;
    case NpyDType::kFloat32:
    case NpyDType::kInt32: return 4;
    case NpyDType::kFloat16:
    case NpyDType::kUInt16:
    case NpyDType::kInt16: return 2;
  }
  return 0;
}

int64_t NpyArray::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<NpyArray> ParseNpy(absl::string_view bytes, absl::string_view what) {
  if (bytes.size() < 10 || bytes.substr(0, kMagic.size()) != kMagic) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": not a .npy file (missing the \\x93NUMPY magic)"));
  }
  const int major = static_cast<unsigned char>(bytes[6]);
  const int minor = static_cast<unsigned char>(bytes[7]);
  size_t len_width;
  if (major == 1) {
    len_width = 2;
  } else if (major == 2 || major == 3) {
    len_width = 4;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": .npy format version ", major, ".", minor,
                     " is not supported (1.0, 2.0, 3.0 are)"));
  }
  if (bytes.size() < 8 + len_width) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": truncated .npy header"));
  }
  const size_t header_len = ReadLittleEndian(bytes, 8, len_width);
  const size_t data_offset = 8 + len_width + header_len;
  if (bytes.size() < data_offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": header length ", header_len, " runs past the end of the ", bytes.size(),
        "-byte file"));
  }
  NpyArray array;
  HeaderParser parser(bytes.substr(8 + len_width, header_len), what);
  absl::Status status = parser.Parse(&array);
  if (!status.ok()) return status;
  absl::string_view payload = bytes.substr(data_offset);
  status = CheckPayload(array, payload.size(), what);
  if (!status.ok()) return status;
  array.data = std::string(payload);
  return array;
}

absl::StatusOr<std::string> SerializeNpy(const NpyArray& array) {
  ROPE_RETURN_IF_ERROR(CheckPayload(array, array.data.size(), "SerializeNpy"));
  std::string shape;
  if (array.shape.size() == 1) {
    shape = absl::StrCat("(", array.shape[0], ",)");
  } else {
    shape = absl::StrCat("(", absl::StrJoin(array.shape, ", "), ")");
  }
  std::string header = absl::StrCat("{'descr': '", NpyDTypeDescr(array.dtype),
                                    "', 'fortran_order': False, 'shape': ", shape, ", }");
  // NumPy pads with spaces and a final '\n' so that the data starts at a
  // multiple of 64 bytes. The prefix is magic + version + header length.
  auto padded_header_len = [&header](size_t len_width) {
    const size_t prefix = kMagic.size() + 2 + len_width;
    return (prefix + header.size() + 1 + 63) / 64 * 64 - prefix;
  };
  const size_t len_width = padded_header_len(2) <= 65535 ? 2 : 4;
  const size_t header_len = padded_header_len(len_width);
  header.append(header_len - header.size() - 1, ' ');
  header.push_back('\n');

  std::string out(kMagic);
  out.push_back(static_cast<char>(len_width == 2 ? 1 : 2));
  out.push_back(0);
  AppendLittleEndian(static_cast<uint32_t>(header.size()), len_width, &out);
  out.append(header);
  out.append(array.data);
  return out;
}

absl::StatusOr<NpyArray> ReadNpyFile(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (file == nullptr) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  std::string bytes;
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file.get())) > 0) bytes.append(buffer, n);
  if (std::ferror(file.get())) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path));
  }
  return ParseNpy(bytes, path);
}

absl::Status WriteNpyFile(const std::string& path, const NpyArray& array) {
  ROPE_ASSIGN_OR_RETURN(std::string bytes, SerializeNpy(array));
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (file == nullptr) return absl::ErrnoToStatus(errno, absl::StrCat("cannot create ", path));
  if (std::fwrite(bytes.data(), 1, bytes.size(), file.get()) != bytes.size()) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", path));
  }
  if (std::fclose(file.release()) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot close ", path));
  }
  return absl::OkStatus();
}

}  // namespace client
}  // namespace rope
