#include "server/kserve/kserve_infer.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "core/engine/hf_config.h"
#include "core/engine/tensor_size.h"
#include "core/proto_engine/request_conversion.h"
#include "core/proto_engine/rope_calls.h"
#include "core/proto_engine/tensor_resolver.h"
#include "server/kserve/kserve_parameters.h"

namespace rope {
namespace kserve {
namespace {

using InputTensor = inference::ModelInferRequest::InferInputTensor;
using OutputTensor = inference::ModelInferResponse::InferOutputTensor;

constexpr char kRegionParam[] = "shared_memory_region";
constexpr char kOffsetParam[] = "shared_memory_offset";
constexpr char kByteSizeParam[] = "shared_memory_byte_size";

constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();

// Request parameters of Triton's own (sequence batching, priorities,
// timeouts, decoupled streaming): accepted and ignored. A ropeserve model
// has no sequences or priorities, and the call's deadline is its timeout.
bool IsTritonParameter(const std::string& name) {
  return name == "sequence_id" || name == "sequence_start" || name == "sequence_end" ||
         name == "priority" || name == "timeout" || name == "triton_enable_empty_final_response";
}

// A model's tensor and parameter names, by operation. Inputs: q, k, then
// the optional ones (rotate: positions; attention: v, sinks, alibi_slopes,
// q_positions, k_positions); the first `required_inputs` must be given.
// Outputs: the first (q_out, scores), the second (k_out, output) that needs
// the second (rotate) or third (attention) input, then an attention model's
// other results.
struct Names {
  std::vector<std::string> inputs;
  int required_inputs;
  std::vector<std::string> outputs;
  std::vector<std::string> parameters;  // the operation's, beside the configuration
};

const Names& NamesOf(ModelOperation operation) {
  static const Names* rotate = new Names{{"q", "k", "positions"},
                                         1,
                                         {"q_out", "k_out"},
                                         {"start_pos", "inverse", "output_dtype", "output_scale",
                                          "k_output_scale"}};
  static const Names* attention =
      new Names{{"q", "k", "v", "sinks", "alibi_slopes", "q_positions", "k_positions"},
                2,
                {"scores", "output", "lse", "top_k_indices", "top_k_probs", "key_mass",
                 "score_rows"},
                {"q_start_pos", "k_start_pos", "causal", "softmax", "scale", "window_left",
                 "window_right", "chunk_size", "softcap", "top_k", "score_rows_start",
                 "score_rows_count"}};
  return operation == ModelOperation::kRotate ? *rotate : *attention;
}

// The built-in models' configuration parameters, by their index in
// ConfigParameters().
enum ConfigParameter : int {
  kTheta,
  kHeadDim,
  kRotaryDim,
  kMaxLen,
  kLayout,
  kRopeScaling,
  kHfConfigJson,
  kHfLayerType,
  kHfLayerIndex,
  kRotaryOffset,
  kNoRope,
  kFloorScale,
  kAttnScale,
  kConfigParameterCount
};

// A rotate model's parameters by their index in Names::parameters, and an
// attention model's.
enum RotateParameter : int { kStartPos, kInverse, kOutputDtype, kOutputScale, kKOutputScale };
enum AttentionParameter : int {
  kQStartPos,
  kKStartPos,
  kCausal,
  kSoftmax,
  kScale,
  kWindowLeft,
  kWindowRight,
  kChunkSize,
  kSoftcap,
  kTopK,
  kScoreRowsStart,
  kScoreRowsCount,
  kAttentionParameterCount
};
constexpr int kOperationParameterCount = kAttentionParameterCount;  // the larger

// An attention model's inputs and outputs by their index in Names.
enum AttentionInput : int { kQ, kK, kV, kSinks, kAlibiSlopes, kQPositions, kKPositions };
constexpr int kMaxInputs = 7;  // the longer list: an attention model's
enum AttentionOutput : int {
  kScoresOut,
  kOutputOut,
  kLseOut,
  kTopKIndicesOut,
  kTopKProbsOut,
  kKeyMassOut,
  kScoreRowsOut
};

// The rope.v1 result each attention output is (top_k_indices and
// top_k_probs are both TOP_K), by AttentionOutput.
constexpr v1::AttentionResult kResultOf[kMaxInferOutputs] = {
    v1::SCORES, v1::OUTPUT, v1::LSE, v1::TOP_K, v1::TOP_K, v1::KEY_MASS, v1::SCORE_ROWS};

const std::vector<std::string>& ConfigParameters() {
  static const std::vector<std::string>* names =
      new std::vector<std::string>{"theta",          "head_dim",       "rotary_dim",
                                   "max_len",        "layout",         "rope_scaling",
                                   "hf_config_json", "hf_layer_type",  "hf_layer_index",
                                   "rotary_offset",  "no_rope",        "floor_scale",
                                   "attn_scale"};
  return *names;
}

// The index of `name` in `names`, or -1.
int SlotOf(const std::vector<std::string>& names, const std::string& name) {
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<int>(i);
  }
  return -1;
}

std::string Quoted(const std::vector<std::string>& names) {
  return absl::StrCat("'", absl::StrJoin(names, "', '"), "'");
}

// a * b for non-negative operands; -1 on overflow.
int64_t CheckedMul(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  return a > kMaxInt64 / b ? -1 : a * b;
}

// Elements of `shape`; -1 when a dimension is negative or the product
// overflows int64 (the engine then names the bad dimension).
int64_t ElementCount(const google::protobuf::RepeatedField<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (dim < 0) return -1;
    count = CheckedMul(count, dim);
    if (count < 0) return -1;
  }
  return count;
}

std::string ShapeText(const google::protobuf::RepeatedField<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

// Where an input's bytes come from.
struct Input {
  InputTensor* tensor = nullptr;
  std::string* raw = nullptr;              // an entry of raw_input_contents
  std::optional<v1::SharedMemoryRef> shm;  // a registered region
};

// The shared-memory parameters of `kind` ("input" / "output") `name`, if
// any. Most tensors have no parameters at all: nothing is looked up then.
absl::StatusOr<std::optional<v1::SharedMemoryRef>> RegionOf(const ParameterMap& parameters,
                                                            absl::string_view kind,
                                                            const std::string& name) {
  if (parameters.empty()) return std::optional<v1::SharedMemoryRef>();
  const std::string what = absl::StrCat(kind, " '", name, "'");
  ROPE_ASSIGN_OR_RETURN(
      std::optional<std::string> region,
      GetString(parameters, kRegionParam, absl::StrCat(what, " parameter '", kRegionParam, "'")));
  ROPE_ASSIGN_OR_RETURN(
      std::optional<int64_t> offset,
      GetInt64(parameters, kOffsetParam, absl::StrCat(what, " parameter '", kOffsetParam, "'")));
  ROPE_ASSIGN_OR_RETURN(std::optional<int64_t> byte_size,
                        GetInt64(parameters, kByteSizeParam,
                                 absl::StrCat(what, " parameter '", kByteSizeParam, "'")));
  if (!region.has_value()) {
    if (offset.has_value() || byte_size.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " has shared-memory parameters but no '", kRegionParam, "'"));
    }
    return std::optional<v1::SharedMemoryRef>();
  }
  if (!byte_size.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is in shared-memory region '", *region,
                                                   "' but has no '", kByteSizeParam, "'"));
  }
  if (*byte_size < 0 || offset.value_or(0) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has shared_memory_offset ", offset.value_or(0),
                     " and shared_memory_byte_size ", *byte_size, ": both must be >= 0"));
  }
  v1::SharedMemoryRef ref;
  ref.set_region(*region);
  ref.set_offset(static_cast<uint64_t>(offset.value_or(0)));
  ref.set_byte_size(static_cast<uint64_t>(*byte_size));
  return std::optional<v1::SharedMemoryRef>(std::move(ref));
}

absl::StatusOr<v1::DType> FloatDatatype(const std::string& datatype, const std::string& input,
                                        const Model& model) {
  if (datatype == "FP32") return v1::FLOAT32;
  if (datatype == "FP16") return v1::FLOAT16;
  if (datatype == "BF16") return v1::BFLOAT16;
  return absl::InvalidArgumentError(absl::StrCat("inference input '", input, "' data-type is '",
                                                 datatype, "', but model '", model.name,
                                                 "' expects 'FP32', 'FP16' or 'BF16'"));
}

int64_t ElementBytes(v1::DType dtype) { return dtype == v1::FLOAT32 ? 4 : 2; }

absl::Status ByteSizeError(int64_t got, const std::string& input, int64_t expected) {
  return absl::InvalidArgumentError(absl::StrCat("unexpected total byte size ", got, " for input '",
                                                 input, "', expecting ", expected));
}

absl::Status TooManyElements(const std::string& input, int64_t elements, int64_t limit) {
  return absl::ResourceExhaustedError(
      absl::StrCat("input '", input, "' has ", elements,
                   " elements: over the server's max_elements_per_request ", limit));
}

// Fills a q / k / v tensor of the rope.v1 request. Inputs in a region stay
// references unless `read_region` (their output does not go to shared
// memory): then they are queued in `reads`, to be copied at run time.
absl::Status FillFloatTensor(const Model& model, const std::string& name, Input& input,
                             bool read_region, int64_t max_elements, v1::Tensor* out,
                             std::vector<InferPlan::RegionRead>* reads) {
  ROPE_ASSIGN_OR_RETURN(v1::DType dtype, FloatDatatype(input.tensor->datatype(), name, model));
  out->set_dtype(dtype);
  // The input's shape is not read again: moved, not copied.
  out->mutable_shape()->Swap(input.tensor->mutable_shape());
  const int64_t elements = ElementCount(out->shape());
  const int64_t expected = elements < 0 ? -1 : CheckedMul(elements, ElementBytes(dtype));
  if (input.shm.has_value()) {
    const int64_t given = input.shm->byte_size() > static_cast<uint64_t>(kMaxInt64)
                              ? -1
                              : static_cast<int64_t>(input.shm->byte_size());
    if (expected >= 0 && given != expected) return ByteSizeError(given, name, expected);
    if (!read_region) {
      *out->mutable_shm() = *input.shm;
      return absl::OkStatus();
    }
    if (elements > max_elements) return TooManyElements(name, elements, max_elements);
    reads->push_back({name, *input.shm, input.tensor->datatype()});
    return absl::OkStatus();
  }
  if (input.raw != nullptr) {
    const int64_t given = static_cast<int64_t>(input.raw->size());
    if (expected >= 0 && given != expected) return ByteSizeError(given, name, expected);
    out->mutable_data()->swap(*input.raw);
    return absl::OkStatus();
  }
  const inference::InferTensorContents& contents = input.tensor->contents();
  if (dtype != v1::FLOAT32) {
    return absl::InvalidArgumentError(
        absl::StrCat("inference input '", name, "' is ", input.tensor->datatype(),
                     ": FP16 and BF16 have no typed contents; send them as raw_input_contents"));
  }
  const int64_t other = contents.bool_contents_size() + contents.int_contents_size() +
                        contents.int64_contents_size() + contents.uint_contents_size() +
                        contents.uint64_contents_size() + contents.fp64_contents_size() +
                        contents.bytes_contents_size();
  if (other != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inference input '", name, "' is FP32: its typed values go in contents.fp32_contents"));
  }
  const int64_t given = int64_t{4} * contents.fp32_contents_size();
  if (expected >= 0 && given != expected) return ByteSizeError(given, name, expected);
  out->mutable_data()->resize(static_cast<size_t>(given));
  if (given > 0) std::memcpy(out->mutable_data()->data(), contents.fp32_contents().data(), given);
  return absl::OkStatus();
}

// The bytes of a float tensor of `tensor`'s dtype and shape; -1 when the shape
// is not valid (the engine then names what is wrong).
int64_t TensorBytes(const v1::Tensor& tensor) {
  const int64_t elements = ElementCount(tensor.shape());
  return elements <= 0 ? -1 : CheckedMul(elements, ElementBytes(tensor.dtype()));
}

// [B, S, H, D] of a rank-4 or rank-3 (B = 1) tensor; false for other ranks.
bool Dims(const v1::Tensor& tensor, int64_t dims[4]) {
  const int rank = tensor.shape_size();
  if (rank != 3 && rank != 4) return false;
  dims[0] = rank == 4 ? tensor.shape(0) : 1;
  for (int i = 1; i < 4; ++i) dims[i] = tensor.shape(rank - 4 + i);
  return true;
}

// The product of `dims` times 4 (every attention result has 4-byte
// elements); -1 on overflow or a negative factor.
int64_t ResultBytes(std::initializer_list<int64_t> dims) {
  int64_t bytes = 4;
  for (int64_t dim : dims) {
    if (dim < 0) return -1;
    bytes = CheckedMul(bytes, dim);
    if (bytes < 0) return -1;
  }
  return bytes;
}

// The bytes of each attention output, by AttentionOutput: scores
// [B, Hq, Sq, Sk], output [B, Sq, Hq, Dv], lse [B, Hq, Sq], top_k_indices
// and top_k_probs [B, Hq, Sq, top_k], key_mass [B, Hq, Sk], score_rows
// [B, Hq, count, Sk]; -1 where the request does not say (the engine then
// names what is wrong).
std::array<int64_t, kMaxInferOutputs> AttentionResultBytes(
    const v1::AttentionScoresRequest& request) {
  std::array<int64_t, kMaxInferOutputs> bytes;
  bytes.fill(-1);
  int64_t q[4], k[4], v[4];
  if (!Dims(request.q(), q) || !Dims(request.k(), k)) return bytes;
  const int64_t batch = q[0], sq = q[1], hq = q[2], sk = k[1];
  bytes[kScoresOut] = ResultBytes({batch, hq, sq, sk});
  if (request.has_v() && Dims(request.v(), v)) {
    bytes[kOutputOut] = ResultBytes({batch, sq, hq, v[3]});
  }
  bytes[kLseOut] = ResultBytes({batch, hq, sq});
  bytes[kTopKIndicesOut] = bytes[kTopKProbsOut] =
      ResultBytes({batch, hq, sq, static_cast<int64_t>(request.top_k())});
  bytes[kKeyMassOut] = ResultBytes({batch, hq, sk});
  const int64_t start = request.score_rows_start();
  if (start >= 0 && start < sq && request.score_rows_count() >= 0) {
    const int64_t rows = request.score_rows_count() > 0 ? request.score_rows_count() : sq - start;
    if (rows <= sq - start) bytes[kScoreRowsOut] = ResultBytes({batch, hq, rows, sk});
  }
  return bytes;
}

// The rope.v1 reference field of attention output `slot`.
v1::SharedMemoryRef* AttentionRegion(int slot, v1::AttentionScoresRequest* request) {
  switch (slot) {
    case kScoresOut:
      return request->mutable_scores_out();
    case kOutputOut:
      return request->mutable_output_out();
    case kLseOut:
      return request->mutable_lse_out();
    case kTopKIndicesOut:
      return request->mutable_top_k_indices_out();
    case kTopKProbsOut:
      return request->mutable_top_k_probs_out();
    case kKeyMassOut:
      return request->mutable_key_mass_out();
    default:
      return request->mutable_score_rows_out();
  }
}

// The rope.v1 reply tensor of attention output `slot`.
v1::Tensor* AttentionReplyTensor(int slot, v1::AttentionScoresResponse* reply) {
  switch (slot) {
    case kScoresOut:
      return reply->mutable_scores();
    case kOutputOut:
      return reply->mutable_output();
    case kLseOut:
      return reply->mutable_lse();
    case kTopKIndicesOut:
      return reply->mutable_top_k_indices();
    case kTopKProbsOut:
      return reply->mutable_top_k_probs();
    case kKeyMassOut:
      return reply->mutable_key_mass();
    default:
      return reply->mutable_score_rows();
  }
}

// A region for an output is its capacity, as in Triton: it must hold the
// result, which takes its first `needed` bytes (the rope.v1 reference then
// names exactly those). `needed` < 0: unknown until the engine validates.
absl::Status FitOutputRegion(const std::string& output, int64_t needed, v1::SharedMemoryRef* ref) {
  if (needed < 0) return absl::OkStatus();
  if (ref->byte_size() < static_cast<uint64_t>(needed)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared memory size specified with the request for output '", output, "' (",
        ref->byte_size(), " bytes) should be at least ", needed, " bytes to hold the results"));
  }
  ref->set_byte_size(static_cast<uint64_t>(needed));
  return absl::OkStatus();
}

// Little-endian INT64 / INT32 bytes into positions.
void DecodePositions(const std::string& bytes, bool int32,
                     google::protobuf::RepeatedField<int64_t>* positions) {
  const size_t width = int32 ? 4 : 8;
  const size_t count = bytes.size() / width;
  positions->Resize(static_cast<int>(count), 0);
  int64_t* out = positions->mutable_data();
  for (size_t i = 0; i < count; ++i) {
    if (int32) {
      int32_t value;
      std::memcpy(&value, bytes.data() + i * width, width);
      out[i] = value;
    } else {
      std::memcpy(&out[i], bytes.data() + i * width, width);
    }
  }
}

// Little-endian FP32 bytes into values.
void DecodeFloats(const std::string& bytes, google::protobuf::RepeatedField<float>* values) {
  const size_t count = bytes.size() / sizeof(float);
  values->Resize(static_cast<int>(count), 0.0f);
  if (count > 0) std::memcpy(values->mutable_data(), bytes.data(), count * sizeof(float));
}

// Where a values input's values are, once CheckValueInput has passed it.
enum class ValueSource { kRegion, kRaw, kTyped };

struct CheckedValueInput {
  ValueSource source;
  int64_t count;           // elements, from the shape
  int64_t expected_bytes;  // count * the datatype's width
};

// The checks every values input (positions, sinks, slopes) shares: its
// shape's dims are >= 0, its element count at most `limit` (none when
// negative), and a region's or raw input's byte size is count * `width`. A
// region is queued in `reads` (read as `datatype` when the plan runs); typed
// contents are left to the caller, which knows their field.
absl::StatusOr<CheckedValueInput> CheckValueInput(const std::string& name, const Input& input,
                                                  int64_t limit, int64_t width,
                                                  const std::string& datatype,
                                                  std::vector<InferPlan::RegionRead>* reads) {
  const int64_t count = ElementCount(input.tensor->shape());
  if (count < 0) {
    return absl::InvalidArgumentError(absl::StrCat("inference input '", name, "' has shape ",
                                                   ShapeText(input.tensor->shape()),
                                                   ": every dimension must be >= 0"));
  }
  if (limit >= 0 && count > limit) return TooManyElements(name, count, limit);
  const int64_t expected = CheckedMul(count, width);
  if (expected < 0) return TooManyElements(name, count, limit);
  if (input.shm.has_value()) {
    const uint64_t given = input.shm->byte_size();
    if (given != static_cast<uint64_t>(expected)) {
      return ByteSizeError(static_cast<int64_t>(std::min<uint64_t>(given, kMaxInt64)), name,
                           expected);
    }
    reads->push_back({name, *input.shm, datatype});
    return CheckedValueInput{ValueSource::kRegion, count, expected};
  }
  if (input.raw != nullptr) {
    if (static_cast<int64_t>(input.raw->size()) != expected) {
      return ByteSizeError(static_cast<int64_t>(input.raw->size()), name, expected);
    }
    return CheckedValueInput{ValueSource::kRaw, count, expected};
  }
  return CheckedValueInput{ValueSource::kTyped, count, expected};
}

absl::Status FillPositions(const std::string& name, Input& input, int64_t max_elements,
                           google::protobuf::RepeatedField<int64_t>* positions,
                           std::vector<InferPlan::RegionRead>* reads) {
  const std::string& datatype = input.tensor->datatype();
  if (datatype != "INT64" && datatype != "INT32") {
    return absl::InvalidArgumentError(absl::StrCat("inference input '", name, "' data-type is '",
                                                   datatype,
                                                   "', but it must be 'INT64', 'INT32' or 'FP64'"));
  }
  const bool int32 = datatype == "INT32";
  const int64_t width = int32 ? 4 : 8;
  // M-RoPE gives a token three positions and a token has at least two
  // features (head_dim is even): more values than this fit no request.
  ROPE_ASSIGN_OR_RETURN(
      const CheckedValueInput checked,
      CheckValueInput(name, input, CheckedMul(max_elements, 2), width, datatype, reads));
  if (checked.source == ValueSource::kRegion) return absl::OkStatus();
  if (checked.source == ValueSource::kRaw) {
    DecodePositions(*input.raw, int32, positions);
    return absl::OkStatus();
  }
  const int64_t count = checked.count;
  const int64_t expected = checked.expected_bytes;
  const inference::InferTensorContents& contents = input.tensor->contents();
  const int given = int32 ? contents.int_contents_size() : contents.int64_contents_size();
  if (contents.ByteSizeLong() != 0 && given == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("inference input '", name, "' is ", datatype, ": its typed values go in ",
                     int32 ? "contents.int_contents" : "contents.int64_contents"));
  }
  if (given != count) return ByteSizeError(int64_t{given} * width, name, expected);
  if (int32) {
    positions->Reserve(given);
    for (int32_t value : contents.int_contents()) positions->Add(value);
  } else {
    *positions = contents.int64_contents();
  }
  return absl::OkStatus();
}

// Little-endian FP64 bytes into values.
void DecodeDoubles(const std::string& bytes, google::protobuf::RepeatedField<double>* values) {
  const size_t count = bytes.size() / sizeof(double);
  values->Resize(static_cast<int>(count), 0.0);
  if (count > 0) std::memcpy(values->mutable_data(), bytes.data(), count * sizeof(double));
}

// Fills fractional positions (rope.v1's fractional_positions,
// q_fractional_positions, k_fractional_positions) from an FP64 positions
// input: raw bytes, contents.fp64_contents, or a region queued in `reads`.
// The engine checks the values (finite, in range) and their count.
absl::Status FillFractionalPositions(const std::string& name, Input& input, int64_t max_elements,
                                     google::protobuf::RepeatedField<double>* positions,
                                     std::vector<InferPlan::RegionRead>* reads) {
  // As FillPositions: more values than this fit no request.
  ROPE_ASSIGN_OR_RETURN(
      const CheckedValueInput checked,
      CheckValueInput(name, input, CheckedMul(max_elements, 2), 8, "FP64", reads));
  if (checked.source == ValueSource::kRegion) return absl::OkStatus();
  if (checked.source == ValueSource::kRaw) {
    DecodeDoubles(*input.raw, positions);
    return absl::OkStatus();
  }
  const int64_t count = checked.count;
  const int64_t expected = checked.expected_bytes;
  const inference::InferTensorContents& contents = input.tensor->contents();
  if (contents.ByteSizeLong() != 0 && contents.fp64_contents_size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inference input '", name, "' is FP64: its typed values go in contents.fp64_contents"));
  }
  if (contents.fp64_contents_size() != count) {
    return ByteSizeError(int64_t{8} * contents.fp64_contents_size(), name, expected);
  }
  *positions = contents.fp64_contents();
  return absl::OkStatus();
}

// Fills a per-head float list (sinks, alibi_slopes) from an FP32 input of
// any shape: raw bytes, contents.fp32_contents, or a region queued in
// `reads` (read when the plan runs). The engine checks the count (Hq).
absl::Status FillFloatList(const std::string& name, Input& input, int64_t max_elements,
                           google::protobuf::RepeatedField<float>* values,
                           std::vector<InferPlan::RegionRead>* reads) {
  const std::string& datatype = input.tensor->datatype();
  if (datatype != "FP32") {
    return absl::InvalidArgumentError(absl::StrCat("inference input '", name, "' data-type is '",
                                                   datatype, "', but it must be 'FP32'"));
  }
  ROPE_ASSIGN_OR_RETURN(const CheckedValueInput checked,
                        CheckValueInput(name, input, max_elements, 4, datatype, reads));
  if (checked.source == ValueSource::kRegion) return absl::OkStatus();
  if (checked.source == ValueSource::kRaw) {
    DecodeFloats(*input.raw, values);
    return absl::OkStatus();
  }
  const int64_t count = checked.count;
  const int64_t expected = checked.expected_bytes;
  const inference::InferTensorContents& contents = input.tensor->contents();
  if (contents.ByteSizeLong() != 0 && contents.fp32_contents_size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inference input '", name, "' is FP32: its typed values go in contents.fp32_contents"));
  }
  if (contents.fp32_contents_size() != count) {
    return ByteSizeError(int64_t{4} * contents.fp32_contents_size(), name, expected);
  }
  *values = contents.fp32_contents();
  return absl::OkStatus();
}

// A request's parameters, found in one pass over its map: each known
// name's value (null: not given), by its index in ConfigParameters() and in
// its operation's Names::parameters.
struct RequestParameters {
  std::array<const inference::InferParameter*, kConfigParameterCount> config{};
  std::array<const inference::InferParameter*, kOperationParameterCount> operation{};
};

// The request parameters of `model`: every name checked (an unknown one, or
// a configuration parameter to a repository model, is INVALID_ARGUMENT),
// each known one's value kept for the typed reads that follow.
absl::StatusOr<RequestParameters> FindParameters(const Model& model,
                                                 const ParameterMap& parameters) {
  RequestParameters found;
  const std::vector<std::string>& operation = NamesOf(model.operation).parameters;
  // The names are disjoint: the order of the look-ups (most requests'
  // parameters first) changes no outcome.
  for (const auto& [name, value] : parameters) {
    if (const int slot = SlotOf(ConfigParameters(), name); slot >= 0) {
      if (model.builtin) {
        found.config[slot] = &value;
        continue;
      }
      return absl::InvalidArgumentError(
          absl::StrCat("parameter '", name, "' configures the built-in models: model '", model.name,
                       "' takes its RoPE configuration from its repository folder"));
    }
    if (const int slot = SlotOf(operation, name); slot >= 0) {
      found.operation[slot] = &value;
      continue;
    }
    if (IsTritonParameter(name)) continue;
    std::vector<std::string> known = operation;  // for the message only
    if (model.builtin)
      known.insert(known.end(), ConfigParameters().begin(), ConfigParameters().end());
    return absl::InvalidArgumentError(absl::StrCat("model '", model.name, "' has no parameter '",
                                                   name, "' (it takes ", Quoted(known), ")"));
  }
  return found;
}

// `where` names the parameter in messages ("parameter 'head_dim'").
absl::StatusOr<uint32_t> Uint32Parameter(const inference::InferParameter* parameter,
                                         absl::string_view where) {
  ROPE_ASSIGN_OR_RETURN(std::optional<int64_t> value, Int64Value(parameter, where));
  if (!value.has_value()) return 0u;
  if (*value < 0 || *value > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " is ", *value, ": must be in [0, 4294967295]"));
  }
  return static_cast<uint32_t>(*value);
}

// The serving engines' variants among a built-in model's parameters, into
// `config`'s fields of the same names: rotary_offset (MLA heads rotating
// their last features), hf_layer_index (a decoder layer of hf_config_json),
// and an explicit NoPE layer (no_rope true, with Llama 4's temperature
// tuning floor_scale and attn_scale). The engine validates the values as it
// does rope.v1's.
absl::Status VariantParametersInto(const RequestParameters& parameters, v1::RopeConfig* config) {
  const auto& given = parameters.config;
  ROPE_ASSIGN_OR_RETURN(uint32_t rotary_offset,
                        Uint32Parameter(given[kRotaryOffset], "parameter 'rotary_offset'"));
  config->set_rotary_offset(rotary_offset);
  if (given[kHfLayerIndex] != nullptr) {
    ROPE_ASSIGN_OR_RETURN(uint32_t layer,
                          Uint32Parameter(given[kHfLayerIndex], "parameter 'hf_layer_index'"));
    config->set_hf_layer_index(layer);
  }
  ROPE_ASSIGN_OR_RETURN(std::optional<bool> no_rope,
                        BoolValue(given[kNoRope], "parameter 'no_rope'"));
  ROPE_ASSIGN_OR_RETURN(std::optional<double> floor_scale,
                        DoubleValue(given[kFloorScale], "parameter 'floor_scale'"));
  ROPE_ASSIGN_OR_RETURN(std::optional<double> attn_scale,
                        DoubleValue(given[kAttnScale], "parameter 'attn_scale'"));
  if (!no_rope.value_or(false)) {
    if (floor_scale.has_value() || attn_scale.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter '", floor_scale.has_value() ? "floor_scale" : "attn_scale",
          "' tunes a NoPE layer's attention temperature: it needs parameter 'no_rope' true"));
    }
    return absl::OkStatus();
  }
  v1::NoRope* nope = config->mutable_no_rope();
  nope->set_floor_scale(floor_scale.value_or(0));
  nope->set_attn_scale(attn_scale.value_or(0));
  return absl::OkStatus();
}

// The rope.v1 config fields (the scaling oneof, mrope, mrope_ernie_3d) a
// built-in model's parameter rope_scaling gives, read with `theta` and
// `head_dim` (the request's; 0: not given).
absl::StatusOr<v1::RopeConfig> ScalingParameterConfig(const std::string& rope_scaling, double theta,
                                                      uint32_t head_dim) {
  // The scaling of a config.json's rope_scaling object, by the engine's
  // own reading of config.json files (transformers' rules and names).
  // rope_theta and head_dim only let the parser accept the object; the
  // request's own theta and head_dim stay the config's.
  absl::StatusOr<HfRopeConfig> hf =
      ParseHfRopeConfig(absl::StrCat("{\"rope_theta\": ", absl::StrFormat("%.17g", theta),
                                     head_dim > 0 ? absl::StrCat(", \"head_dim\": ", head_dim) : "",
                                     ", \"rope_scaling\": ", rope_scaling, "}"),
                        HfLayerSelector());
  if (!hf.ok()) {
    return absl::Status(hf.status().code(),
                        absl::StrCat("parameter 'rope_scaling': ", hf.status().message()));
  }
  // Applied to the request's head_dim as a config.json would be, so that
  // what depends on the width (Ernie's h and w sections beside
  // freq_allocation) is filled in; without a head_dim the request fails
  // on it anyway, and the scaling alone is taken.
  RopeConfig scaled;
  scaled.scaling = hf->scaling;
  scaled.mrope = hf->mrope;
  if (head_dim > 0) {
    RopeConfig shape;
    shape.head_dim = head_dim;
    absl::StatusOr<RopeConfig> applied = ApplyHfRopeConfig(shape, *hf);
    if (!applied.ok()) {
      return absl::Status(applied.status().code(),
                          absl::StrCat("parameter 'rope_scaling': ", applied.status().message()));
    }
    scaled.scaling = applied->scaling;
    scaled.mrope = applied->mrope;
  }
  return ConfigToProto(scaled);
}

// The rope.v1 config of a built-in model's request, from its parameters.
absl::StatusOr<v1::RopeConfig> BuiltinConfig(const Model& model,
                                             const RequestParameters& parameters) {
  const auto& given = parameters.config;
  v1::RopeConfig config;
  ROPE_ASSIGN_OR_RETURN(std::optional<double> theta,
                        DoubleValue(given[kTheta], "parameter 'theta'"));
  ROPE_ASSIGN_OR_RETURN(uint32_t head_dim,
                        Uint32Parameter(given[kHeadDim], "parameter 'head_dim'"));
  ROPE_ASSIGN_OR_RETURN(uint32_t rotary_dim,
                        Uint32Parameter(given[kRotaryDim], "parameter 'rotary_dim'"));
  ROPE_ASSIGN_OR_RETURN(uint32_t max_len, Uint32Parameter(given[kMaxLen], "parameter 'max_len'"));
  ROPE_ASSIGN_OR_RETURN(std::optional<std::string> layout,
                        StringValue(given[kLayout], "parameter 'layout'"));
  ROPE_ASSIGN_OR_RETURN(std::optional<std::string> rope_scaling,
                        StringValue(given[kRopeScaling], "parameter 'rope_scaling'"));
  ROPE_ASSIGN_OR_RETURN(std::optional<std::string> hf_config_json,
                        StringValue(given[kHfConfigJson], "parameter 'hf_config_json'"));
  ROPE_ASSIGN_OR_RETURN(std::optional<std::string> hf_layer_type,
                        StringValue(given[kHfLayerType], "parameter 'hf_layer_type'"));
  ROPE_RETURN_IF_ERROR(VariantParametersInto(parameters, &config));
  config.set_theta(theta.value_or(0));
  config.set_head_dim(head_dim);
  config.set_rotary_dim(rotary_dim);
  config.set_max_len(max_len);
  if (layout.has_value()) {
    ROPE_ASSIGN_OR_RETURN(v1::Layout parsed, ParseLayout(*layout, "parameter 'layout'"));
    config.set_layout(parsed);
  }
  if (hf_config_json.has_value()) config.set_hf_config_json(*std::move(hf_config_json));
  if (hf_layer_type.has_value()) config.set_hf_layer_type(*std::move(hf_layer_type));
  if (rope_scaling.has_value()) {
    if (!config.hf_config_json().empty()) {
      return absl::InvalidArgumentError(
          "parameter 'rope_scaling' is set beside 'hf_config_json': put rope_scaling inside the "
          "config.json");
    }
    // The scaling of a config.json's rope_scaling object (cached per text,
    // theta and head_dim for the built-in models: kserve_scaling_cache.h).
    const double theta_read = config.theta() > 0 ? config.theta() : 10000.0;
    auto convert = [&] { return ScalingParameterConfig(*rope_scaling, theta_read, head_dim); };
    std::shared_ptr<const v1::RopeConfig> cached;
    if (model.scaling_cache != nullptr) {
      ROPE_ASSIGN_OR_RETURN(cached,
                            model.scaling_cache->Get(*rope_scaling, theta_read, head_dim, convert));
    } else {
      ROPE_ASSIGN_OR_RETURN(v1::RopeConfig converted, convert());
      cached = std::make_shared<const v1::RopeConfig>(std::move(converted));
    }
    const v1::RopeConfig& proto = *cached;
    if (proto.scaling_case() != v1::RopeConfig::SCALING_NOT_SET) {
      // Copy only the oneof member (and mrope): the rest of `proto` is zero.
      v1::RopeConfig with_scaling = proto;
      with_scaling.clear_theta();
      with_scaling.clear_layout();
      with_scaling.clear_hf_config_json();
      with_scaling.clear_hf_layer_type();
      with_scaling.clear_mrope();
      config.MergeFrom(with_scaling);
    }
    if (proto.has_mrope()) *config.mutable_mrope() = proto.mrope();
    config.set_mrope_ernie_3d(proto.mrope_ernie_3d());
  }
  return config;
}

// A rotate model's float8 outputs (rope.v1's output_dtype, output_scale,
// k_output_scale): output_dtype names the float8 format as rope.v1 and torch
// do ("FLOAT8_E4M3FN" or "FLOAT8_E5M2", any case); the scales are numbers.
absl::Status OutputDtypeInto(const RequestParameters& parameters, v1::RotateRequest* rotate) {
  const auto& given = parameters.operation;
  ROPE_ASSIGN_OR_RETURN(std::optional<std::string> output_dtype,
                        StringValue(given[kOutputDtype], "parameter 'output_dtype'"));
  ROPE_ASSIGN_OR_RETURN(std::optional<double> output_scale,
                        DoubleValue(given[kOutputScale], "parameter 'output_scale'"));
  ROPE_ASSIGN_OR_RETURN(std::optional<double> k_output_scale,
                        DoubleValue(given[kKOutputScale], "parameter 'k_output_scale'"));
  if (output_dtype.has_value()) {
    const std::string upper = absl::AsciiStrToUpper(*output_dtype);
    if (upper == "FLOAT8_E4M3FN") {
      rotate->set_output_dtype(v1::FLOAT8_E4M3FN);
    } else if (upper == "FLOAT8_E5M2") {
      rotate->set_output_dtype(v1::FLOAT8_E5M2);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter 'output_dtype' is \"", *output_dtype,
                       "\": must be \"FLOAT8_E4M3FN\" or \"FLOAT8_E5M2\""));
    }
  }
  // rope.v1 refuses a scale without a float8 output_dtype, naming its field.
  rotate->set_output_scale(output_scale.value_or(0));
  rotate->set_k_output_scale(k_output_scale.value_or(0));
  return absl::OkStatus();
}

absl::Status OperationParametersInto(const RequestParameters& parameters, InferPlan* plan) {
  const auto& given = parameters.operation;
  if (plan->model->operation == ModelOperation::kRotate) {
    ROPE_ASSIGN_OR_RETURN(std::optional<int64_t> start_pos,
                          Int64Value(given[kStartPos], "parameter 'start_pos'"));
    ROPE_ASSIGN_OR_RETURN(std::optional<bool> inverse,
                          BoolValue(given[kInverse], "parameter 'inverse'"));
    plan->rotate.set_start_pos(start_pos.value_or(0));
    plan->rotate.set_inverse(inverse.value_or(false));
    return OutputDtypeInto(parameters, &plan->rotate);
  }
  v1::AttentionScoresRequest& attention = plan->attention.emplace();
  ROPE_ASSIGN_OR_RETURN(std::optional<int64_t> q_start_pos,
                        Int64Value(given[kQStartPos], "parameter 'q_start_pos'"));
  ROPE_ASSIGN_OR_RETURN(std::optional<int64_t> k_start_pos,
                        Int64Value(given[kKStartPos], "parameter 'k_start_pos'"));
  ROPE_ASSIGN_OR_RETURN(std::optional<bool> causal,
                        BoolValue(given[kCausal], "parameter 'causal'"));
  ROPE_ASSIGN_OR_RETURN(std::optional<bool> softmax,
                        BoolValue(given[kSoftmax], "parameter 'softmax'"));
  ROPE_ASSIGN_OR_RETURN(std::optional<double> scale,
                        DoubleValue(given[kScale], "parameter 'scale'"));
  ROPE_ASSIGN_OR_RETURN(std::optional<int64_t> window_left,
                        Int64Value(given[kWindowLeft], "parameter 'window_left'"));
  ROPE_ASSIGN_OR_RETURN(std::optional<int64_t> window_right,
                        Int64Value(given[kWindowRight], "parameter 'window_right'"));
  ROPE_ASSIGN_OR_RETURN(std::optional<int64_t> chunk_size,
                        Int64Value(given[kChunkSize], "parameter 'chunk_size'"));
  ROPE_ASSIGN_OR_RETURN(std::optional<double> softcap,
                        DoubleValue(given[kSoftcap], "parameter 'softcap'"));
  ROPE_ASSIGN_OR_RETURN(uint32_t top_k, Uint32Parameter(given[kTopK], "parameter 'top_k'"));
  ROPE_ASSIGN_OR_RETURN(std::optional<int64_t> score_rows_start,
                        Int64Value(given[kScoreRowsStart], "parameter 'score_rows_start'"));
  ROPE_ASSIGN_OR_RETURN(std::optional<int64_t> score_rows_count,
                        Int64Value(given[kScoreRowsCount], "parameter 'score_rows_count'"));
  attention.set_q_start_pos(q_start_pos.value_or(0));
  attention.set_k_start_pos(k_start_pos.value_or(0));
  attention.set_causal(causal.value_or(false));
  attention.set_softmax(softmax.value_or(false));
  attention.set_scale(scale.value_or(0));
  // The window's sides are rope.v1 `optional`s: set only when given. The
  // engine validates every value and names the rope.v1 field, whose name
  // is the parameter's.
  if (window_left.has_value()) attention.set_window_left(*window_left);
  if (window_right.has_value()) attention.set_window_right(*window_right);
  attention.set_chunk_size(chunk_size.value_or(0));
  attention.set_softcap(softcap.value_or(0));
  attention.set_top_k(top_k);
  attention.set_score_rows_start(score_rows_start.value_or(0));
  attention.set_score_rows_count(score_rows_count.value_or(0));
  return absl::OkStatus();
}

// Copies `ref`'s bytes out of the caller's host region, through the
// resolver every rope.v1 call uses (the region is the caller's, the range
// within it, the backing object still there; a shrink during the copy is
// caught after it). The alignment checked is that of `datatype`'s elements
// (at most 4 bytes: the copy itself needs none).
absl::StatusOr<std::string> ReadRegion(const CallerRegions& regions,
                                       const v1::SharedMemoryRef& ref, const std::string& input,
                                       const std::string& datatype) {
  const std::string name = absl::StrCat("input '", input, "'");
  v1::Tensor tensor;
  *tensor.mutable_shm() = ref;
  ConstTensorView view;
  view.dtype = datatype == "FP16" || datatype == "BF16" ? DType::kFloat16 : DType::kFloat32;
  TensorResolver resolver(regions);
  ROPE_RETURN_IF_ERROR(resolver.ResolveInput(tensor, name, /*group=*/0, &view));
  if (resolver.on_device()) {
    return absl::InvalidArgumentError(
        absl::StrCat("inference input '", input, "' is in CUDA region '", ref.region(),
                     "', which the server reads only on the device: ",
                     input == "positions" ? "send positions as raw_input_contents"
                                          : "give its output a CUDA region too"));
  }
  std::string bytes(view.byte_size, '\0');
  if (!bytes.empty()) std::memcpy(bytes.data(), view.data, bytes.size());
  // A backing object shrunk while it was read left zero pages behind
  // (shm_fault_guard.h): the bytes are not the client's.
  ROPE_RETURN_IF_ERROR(resolver.CheckAfter());
  return bytes;
}

absl::Status ReadRegions(const CallerRegions& regions, InferPlan* plan) {
  for (const InferPlan::RegionRead& read : plan->reads) {
    ROPE_ASSIGN_OR_RETURN(std::string bytes,
                          ReadRegion(regions, read.ref, read.input, read.datatype));
    const bool int32 = read.datatype == "INT32";
    const bool fractional = read.datatype == "FP64";
    if (plan->attention.has_value()) {
      v1::AttentionScoresRequest& attention = *plan->attention;
      if (fractional) {
        DecodeDoubles(bytes, read.input == "q_positions"
                                 ? attention.mutable_q_fractional_positions()
                                 : attention.mutable_k_fractional_positions());
      } else if (read.input == "sinks") {
        DecodeFloats(bytes, attention.mutable_sinks());
      } else if (read.input == "alibi_slopes") {
        DecodeFloats(bytes, attention.mutable_alibi_slopes());
      } else if (read.input == "q_positions") {
        DecodePositions(bytes, int32, attention.mutable_q_positions());
      } else {
        DecodePositions(bytes, int32, attention.mutable_k_positions());
      }
    } else if (read.input == "positions" && fractional) {
      DecodeDoubles(bytes, plan->rotate.mutable_fractional_positions());
    } else if (read.input == "positions") {
      DecodePositions(bytes, int32, plan->rotate.mutable_positions());
    } else {
      v1::Tensor* tensor = read.input == "q" ? plan->rotate.mutable_q() : plan->rotate.mutable_k();
      tensor->mutable_data()->swap(bytes);
    }
  }
  plan->reads.clear();
  return absl::OkStatus();
}

// Moves `tensor` (a rope.v1 result) into `reply` as its next output,
// `name`: its bytes are moved, never copied.
void AddOutput(absl::string_view name, v1::Tensor* tensor, InferReply* reply) {
  const int index = reply->output_count++;
  InferReply::Output& output = reply->outputs[index];
  output.name = name;
  output.parameters.clear();
  if (tensor->dtype() == v1::FLOAT8_E4M3FN || tensor->dtype() == v1::FLOAT8_E5M2) {
    // KServe v2 has no float8 datatype: the codes travel as UINT8, one byte
    // each, and the output's parameter output_dtype says which format.
    output.datatype = "UINT8";
    inference::InferParameter format;
    format.set_string_param(v1::DType_Name(tensor->dtype()));
    output.parameters.emplace_back("output_dtype", std::move(format));
  } else {
    output.datatype = DatatypeName(tensor->dtype());
  }
  output.shape.Swap(tensor->mutable_shape());
  std::string& raw = reply->raw[index];
  raw.clear();
  if (tensor->has_shm()) {
    // Written to the caller's region: Triton leaves an empty entry so that
    // raw_output_contents stays aligned with outputs.
    inference::InferParameter region, offset, byte_size;
    region.set_string_param(tensor->shm().region());
    offset.set_int64_param(static_cast<int64_t>(tensor->shm().offset()));
    byte_size.set_int64_param(static_cast<int64_t>(tensor->shm().byte_size()));
    output.parameters.emplace_back(kRegionParam, std::move(region));
    output.parameters.emplace_back(kOffsetParam, std::move(offset));
    output.parameters.emplace_back(kByteSizeParam, std::move(byte_size));
    return;
  }
  raw.swap(*tensor->mutable_data());
}

}  // namespace

absl::string_view DatatypeName(v1::DType dtype) {
  switch (dtype) {
    case v1::FLOAT32:
      return "FP32";
    case v1::FLOAT16:
      return "FP16";
    case v1::BFLOAT16:
      return "BF16";
    case v1::INT32:
      return "INT32";
    default:
      return "";
  }
}

absl::StatusOr<InferPlan> PlanModelInfer(const Model& model, inference::ModelInferRequest* request,
                                         int64_t max_elements) {
  InferPlan plan;
  plan.model = &model;
  plan.id = request->id();
  ROPE_ASSIGN_OR_RETURN(const RequestParameters parameters,
                        FindParameters(model, request->parameters()));
  const Names& names = NamesOf(model.operation);
  // The per-slot arrays below hold every name of a model.
  if (names.inputs.size() > size_t{kMaxInputs} ||
      names.outputs.size() > size_t{kMaxInferOutputs}) {
    return absl::InternalError(absl::StrCat("model '", model.name, "' has more tensors than ",
                                            "a ModelInfer plan holds"));
  }

  // Inputs, by slot (their index in names.inputs): each named once, each
  // with one source of bytes.
  std::array<Input, kMaxInputs> inputs{};
  int raw_used = 0;
  const int raw_count = request->raw_input_contents_size();
  for (InputTensor& tensor : *request->mutable_inputs()) {
    const std::string& name = tensor.name();
    const int slot = SlotOf(names.inputs, name);
    if (slot < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected inference input '", name, "' for model '", model.name,
                       "' (its inputs are ", Quoted(names.inputs), ")"));
    }
    Input& input = inputs[slot];
    if (input.tensor != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("inference input '", name, "' is given twice"));
    }
    input.tensor = &tensor;
    ROPE_ASSIGN_OR_RETURN(input.shm, RegionOf(tensor.parameters(), "input", name));
    const bool typed = tensor.has_contents();
    if (input.shm.has_value()) {
      if (typed) {
        return absl::InvalidArgumentError(absl::StrCat(
            "inference input '", name, "' has contents and shared-memory parameters: give one"));
      }
    } else if (typed) {
      if (raw_count != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("contents field must not be specified when using raw_input_contents for '",
                         name, "' for model '", model.name, "'"));
      }
    } else if (raw_used < raw_count) {
      input.raw = request->mutable_raw_input_contents(raw_used++);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("inference input '", name,
                       "' has no data: give it a raw_input_contents entry, "
                       "contents, or shared-memory parameters"));
    }
  }
  if (raw_used != raw_count) {
    return absl::InvalidArgumentError(
        absl::StrCat("raw_input_contents has ", raw_count, " entries for ", raw_used,
                     " inputs not in shared memory: one per such input, in the order of inputs"));
  }
  for (int slot = 0; slot < names.required_inputs; ++slot) {
    if (inputs[slot].tensor == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model '", model.name, "' needs inference input '", names.inputs[slot], "'"));
    }
  }

  // Outputs, by slot: the ones asked for (default: every one the inputs
  // give), each possibly to a region. Each slot is asked at most once, so
  // plan.outputs never holds more than kMaxInferOutputs.
  std::array<bool, kMaxInferOutputs> asked{};
  std::array<std::optional<v1::SharedMemoryRef>, kMaxInferOutputs> output_regions;
  for (const auto& output : request->outputs()) {
    const std::string& name = output.name();
    const int slot = SlotOf(names.outputs, name);
    if (slot < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected inference output '", name, "' for model '", model.name,
                       "' (its outputs are ", Quoted(names.outputs), ")"));
    }
    if (asked[slot]) {
      return absl::InvalidArgumentError(
          absl::StrCat("inference output '", name, "' is requested twice"));
    }
    asked[slot] = true;
    ROPE_ASSIGN_OR_RETURN(output_regions[slot], RegionOf(output.parameters(), "output", name));
    plan.outputs[plan.output_count++] = slot;
  }
  // The second output (k_out, output) needs the optional second input (k, v).
  const int second_input = model.operation == ModelOperation::kRotate ? 1 : 2;
  const bool has_second = inputs[second_input].tensor != nullptr;
  if (plan.output_count == 0) {
    plan.outputs[plan.output_count++] = 0;
    if (has_second) plan.outputs[plan.output_count++] = 1;
  } else if (asked[1] && !has_second) {
    return absl::InvalidArgumentError(
        absl::StrCat("inference output '", names.outputs[1], "' needs inference input '",
                     names.inputs[second_input], "', which the request does not have"));
  }
  auto region_of = [&](int slot) -> const v1::SharedMemoryRef* {
    return output_regions[slot].has_value() ? &*output_regions[slot] : nullptr;
  };

  // The rope.v1 request.
  ROPE_RETURN_IF_ERROR(OperationParametersInto(parameters, &plan));
  v1::RopeConfig config;
  if (model.builtin) {
    ROPE_ASSIGN_OR_RETURN(config, BuiltinConfig(model, parameters));
  } else {
    config = model.config;
  }
  if (model.operation == ModelOperation::kRotate) {
    v1::RotateRequest& rotate = plan.rotate;
    *rotate.mutable_config() = std::move(config);
    for (int slot : {0, 1}) {
      if (inputs[slot].tensor == nullptr) continue;
      const std::string name = names.inputs[slot];
      const v1::SharedMemoryRef* out_region = region_of(slot);
      v1::Tensor* tensor = slot == 0 ? rotate.mutable_q() : rotate.mutable_k();
      ROPE_RETURN_IF_ERROR(FillFloatTensor(model, name, inputs[slot],
                                           /*read_region=*/out_region == nullptr, max_elements,
                                           tensor, &plan.reads));
      if (out_region != nullptr) {
        v1::SharedMemoryRef* ref = slot == 0 ? rotate.mutable_q_out() : rotate.mutable_k_out();
        *ref = *out_region;
        ROPE_RETURN_IF_ERROR(FitOutputRegion(names.outputs[slot], TensorBytes(*tensor), ref));
      }
    }
    if (inputs[2].tensor != nullptr) {
      ROPE_RETURN_IF_ERROR(
          inputs[2].tensor->datatype() == "FP64"
              ? FillFractionalPositions("positions", inputs[2], max_elements,
                                        rotate.mutable_fractional_positions(), &plan.reads)
              : FillPositions("positions", inputs[2], max_elements, rotate.mutable_positions(),
                              &plan.reads));
    }
  } else {
    v1::AttentionScoresRequest& attention = *plan.attention;
    *attention.mutable_config() = std::move(config);
    for (int slot : {kQ, kK, kV}) {
      if (inputs[slot].tensor == nullptr) continue;
      v1::Tensor* tensor = slot == kQ   ? attention.mutable_q()
                           : slot == kK ? attention.mutable_k()
                                        : attention.mutable_v();
      // Attention never writes its inputs: references stay references.
      ROPE_RETURN_IF_ERROR(FillFloatTensor(model, names.inputs[slot], inputs[slot],
                                           /*read_region=*/false, max_elements, tensor,
                                           &plan.reads));
    }
    if (inputs[kSinks].tensor != nullptr) {
      ROPE_RETURN_IF_ERROR(FillFloatList("sinks", inputs[kSinks], max_elements,
                                         attention.mutable_sinks(), &plan.reads));
    }
    if (inputs[kAlibiSlopes].tensor != nullptr) {
      ROPE_RETURN_IF_ERROR(FillFloatList("alibi_slopes", inputs[kAlibiSlopes], max_elements,
                                         attention.mutable_alibi_slopes(), &plan.reads));
    }
    // Explicit positions: integers (INT64 / INT32), or fractional ones
    // (FP64: rope.v1's q_fractional_positions / k_fractional_positions).
    for (int slot : {kQPositions, kKPositions}) {
      Input& input = inputs[slot];
      if (input.tensor == nullptr) continue;
      const bool q = slot == kQPositions;
      ROPE_RETURN_IF_ERROR(
          input.tensor->datatype() == "FP64"
              ? FillFractionalPositions(names.inputs[slot], input, max_elements,
                                        q ? attention.mutable_q_fractional_positions()
                                          : attention.mutable_k_fractional_positions(),
                                        &plan.reads)
              : FillPositions(names.inputs[slot], input, max_elements,
                              q ? attention.mutable_q_positions() : attention.mutable_k_positions(),
                              &plan.reads));
    }
    // Outputs named beyond scores and output: they are the results asked
    // for (rope.v1 refuses a result listed twice, and top_k_indices and
    // top_k_probs share TOP_K). Otherwise results stays empty, today's
    // computation (scores, and output with v), of which the reply carries
    // the outputs named: the bits of the rope.v1 call clients made before
    // results existed (its probabilities are rounded differently from the
    // results path's).
    bool beyond_default = false;
    for (int i = 0; i < plan.output_count; ++i) {
      beyond_default = beyond_default || plan.outputs[i] > kOutputOut;
    }
    if (beyond_default) {
      std::array<bool, kMaxInferOutputs> listed{};
      for (int i = 0; i < plan.output_count; ++i) {
        const v1::AttentionResult result = kResultOf[plan.outputs[i]];
        if (listed[result]) continue;
        listed[result] = true;
        attention.add_results(result);
      }
    }
    const std::array<int64_t, kMaxInferOutputs> bytes = AttentionResultBytes(attention);
    for (int slot = 0; slot < kMaxInferOutputs; ++slot) {
      const v1::SharedMemoryRef* region = region_of(slot);
      if (region == nullptr) continue;
      v1::SharedMemoryRef* ref = AttentionRegion(slot, &attention);
      *ref = *region;
      ROPE_RETURN_IF_ERROR(FitOutputRegion(names.outputs[slot], bytes[slot], ref));
    }
  }
  return plan;
}

CallEstimate PlanEstimate(const InferPlan& plan) {
  CallEstimate estimate = plan.model->operation == ModelOperation::kRotate
                              ? EstimateRotate(plan.rotate)
                              : EstimateAttentionScores(*plan.attention);
  if (plan.attention.has_value()) {
    // The per-head lists and positions decoded out of raw bytes are copies
    // the rope.v1 request holds beside the request's own bytes (each
    // bounded by max_elements when the plan was built).
    const v1::AttentionScoresRequest& attention = *plan.attention;
    const int64_t decoded =
        int64_t{8} * (attention.q_positions_size() + attention.k_positions_size() +
                      attention.q_fractional_positions_size() +
                      attention.k_fractional_positions_size()) +
        int64_t{4} * (attention.sinks_size() + attention.alibi_slopes_size());
    estimate.more_bytes = SaturatingAdd(estimate.more_bytes, decoded);
  }
  for (const InferPlan::RegionRead& read : plan.reads) {
    const uint64_t size = read.ref.byte_size();
    const int64_t bytes =
        size > static_cast<uint64_t>(kMaxInt64) ? kMaxInt64 : static_cast<int64_t>(size);
    // The bytes read and what they become in the request: as many again,
    // twice as many for INT32 positions (held as int64).
    const int64_t held = read.datatype == "INT32" ? 3 : 2;
    estimate.more_bytes = SaturatingAdd(estimate.more_bytes, SaturatingMul(bytes, held));
    estimate.may_run_inline = false;
  }
  return estimate;
}

absl::Status RunModelInfer(Engine& engine, const CallContext& call, InferPlan* plan,
                           InferReply* reply, InferTimings* timings) {
  const absl::Time start = absl::Now();
  ROPE_RETURN_IF_ERROR(ReadRegions(call.regions, plan));
  reply->model_name = plan->model->name;
  reply->model_version = kModelVersion;
  reply->id = std::move(plan->id);
  reply->output_count = 0;
  if (plan->model->operation == ModelOperation::kRotate) {
    v1::RotateResponse rotated;
    ROPE_RETURN_IF_ERROR(AnswerRotate(engine, &plan->rotate, &rotated, call));
    const absl::Time computed = absl::Now();
    const Names& names = NamesOf(ModelOperation::kRotate);
    for (int i = 0; i < plan->output_count; ++i) {
      const int slot = plan->outputs[i];
      AddOutput(names.outputs[slot], slot == 0 ? rotated.mutable_q() : rotated.mutable_k(),
                reply);
    }
    if (timings != nullptr) {
      timings->infer = computed - start;
      timings->output = absl::Now() - computed;
    }
    return absl::OkStatus();
  }
  v1::AttentionScoresResponse scored;
  ROPE_RETURN_IF_ERROR(AnswerAttentionScores(engine, *plan->attention, &scored, call));
  const absl::Time computed = absl::Now();
  const Names& names = NamesOf(ModelOperation::kAttention);
  for (int i = 0; i < plan->output_count; ++i) {
    const int slot = plan->outputs[i];
    AddOutput(names.outputs[slot], AttentionReplyTensor(slot, &scored), reply);
  }
  if (timings != nullptr) {
    timings->infer = computed - start;
    timings->output = absl::Now() - computed;
  }
  return absl::OkStatus();
}

absl::Status RunModelInfer(Engine& engine, const CallContext& call, InferPlan* plan,
                           inference::ModelInferResponse* response, InferTimings* timings) {
  InferReply reply;
  ROPE_RETURN_IF_ERROR(RunModelInfer(engine, call, plan, &reply, timings));
  ToResponse(&reply, response);
  return absl::OkStatus();
}

}  // namespace kserve
}  // namespace rope
