#include "tests/fuzz/request_fuzz_target.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "rope/v1/rope.pb.h"
#include "core/backends/cpu/cpu_backend.h"
#include "core/engine/engine.h"
#include "core/proto_engine/parsed_size.h"
#include "core/proto_engine/request_conversion.h"
#include "core/proto_engine/rope_calls.h"
#include "core/proto_engine/shm_calls.h"
#include "core/proto_engine/shm_registry.h"
#include "google/protobuf/util/message_differencer.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "inference/grpc_service.pb.h"
#include "server/kserve/kserve_infer.h"
#include "server/kserve/kserve_models.h"
#include "server/kserve/kserve_reply.h"
#include "server/kserve/kserve_reply_wire.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

namespace rope {
namespace fuzz {
namespace {

// Small limits so that no input can make a run slow or large: tables of at
// most 4096 rows, 64 Ki elements per request, a 4 MiB cache (so configs
// churn through evictions).
Engine& SharedEngine() {
  static Engine* engine = [] {
    absl::StatusOr<std::unique_ptr<Backend>> backend = NewCpuBackend(1);
    if (!backend.ok()) {
      std::fprintf(stderr, "NewCpuBackend failed: %s\n", backend.status().ToString().c_str());
      std::abort();
    }
    EngineLimits limits;
    limits.max_len_cap = 4096;
    limits.max_elements_per_request = 1 << 16;
    limits.table_cache_bytes = 4 << 20;
    limits.hf_config_cache_bytes = 1 << 20;  // config.json texts churn through evictions too
    limits.hf_config_cache_entries = 64;
    return new Engine(*std::move(backend), limits);
  }();
  return *engine;
}

// One real 64 KiB POSIX shared-memory region, "fuzz", owned by "fuzzer", so
// that references in inputs reach the resolution checks and the engine (the
// object is unlinked at once: the mapping keeps it).
constexpr char kFuzzOwner[] = "fuzzer";
const ShmRegistry& SharedRegions() {
  static ShmRegistry* registry = [] {
    auto* regions = new ShmRegistry(ShmLimits{});
    const std::string key = "/rope-fuzz-" + std::to_string(getpid());
    const int fd = shm_open(key.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || posix_fallocate(fd, 0, 1 << 16) != 0) {
      std::fprintf(stderr, "cannot create the fuzz region %s\n", key.c_str());
      std::abort();
    }
    const absl::Status registered = regions->Register(kFuzzOwner, "fuzz", key, 0, 1 << 16);
    close(fd);
    shm_unlink(key.c_str());
    if (!registered.ok()) {
      std::fprintf(stderr, "cannot register the fuzz region: %s\n",
                   registered.ToString().c_str());
      std::abort();
    }
    return regions;
  }();
  return *registry;
}

// ROPE_FUZZ_VERBOSE=1 prints every status, to see what an input does.
bool Verbose() {
  static const bool verbose = std::getenv("ROPE_FUZZ_VERBOSE") != nullptr;
  return verbose;
}

// A client error must carry a specific code and say what is wrong.
void CheckRejection(const absl::Status& status) {
  if (Verbose()) std::fprintf(stderr, "  status: %s\n", status.ToString().c_str());
  if (status.ok()) return;
  if (status.code() == absl::StatusCode::kUnknown || status.code() == absl::StatusCode::kInternal ||
      status.message().empty()) {
    std::fprintf(stderr, "catch-all rejection of a client request: %s\n",
                 status.ToString().c_str());
    std::abort();
  }
}

// Parses `request` as the server will: its parsed size bounded from the
// wire bytes first. Whatever the parser accepts, the bound must accept and
// must not undercharge (protobuf's SpaceUsedLong of the result).
bool ParseCharged(google::protobuf::Message* request, const uint8_t* data, size_t size) {
  const absl::string_view wire(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<int64_t> bound = ParsedSizeBound(*request->GetDescriptor(), wire);
  if (!request->ParseFromArray(data, static_cast<int>(size))) return false;
  const int64_t used = static_cast<int64_t>(request->SpaceUsedLong());
  if (!bound.ok() || *bound < used) {
    std::fprintf(stderr, "parsed size undercharged: bound %s, SpaceUsedLong %lld\n",
                 bound.ok() ? std::to_string(*bound).c_str() : bound.status().ToString().c_str(),
                 static_cast<long long>(used));
    std::abort();
  }
  return true;
}

// Calls as the service makes them: references resolve against the fuzz
// region, owned by the fuzzer.
CallContext FuzzCall() {
  CallContext call;
  call.regions.registry = &SharedRegions();
  call.regions.owner = [] { return std::string(kFuzzOwner); };
  return call;
}

void RunRotate(const uint8_t* data, size_t size) {
  v1::RotateRequest request;
  if (!ParseCharged(&request, data, size)) return;
  v1::RotateResponse reply;
  const absl::Status status = AnswerRotate(SharedEngine(), &request, &reply, FuzzCall());
  CheckRejection(status);
  if (status.ok()) {
    // Undo it: the reply's tensors (bytes, or the references written) sent
    // back with inverse flipped must pass too.
    *request.mutable_q() = reply.q();
    if (request.has_k()) *request.mutable_k() = reply.k();
    request.set_inverse(!request.inverse());
    v1::RotateResponse undone;
    CheckRejection(AnswerRotate(SharedEngine(), &request, &undone, FuzzCall()));
  }
}

void RunAttention(const uint8_t* data, size_t size) {
  v1::AttentionScoresRequest request;
  if (!ParseCharged(&request, data, size)) return;
  v1::AttentionScoresResponse reply;
  CheckRejection(AnswerAttentionScores(SharedEngine(), request, &reply, FuzzCall()));
}

void RunGetTable(const uint8_t* data, size_t size) {
  v1::GetTableRequest request;
  if (!ParseCharged(&request, data, size)) return;
  absl::StatusOr<RopeConfig> config = ConfigFromProto(request.config());
  CheckRejection(config.status());
  if (!config.ok()) return;
  absl::StatusOr<TableSlice> slice =
      SharedEngine().GetTable(*config, request.start(), request.count());
  CheckRejection(slice.status());
  if (!slice.ok()) return;
  // Read the first and last value of the slice, as the service's reply does.
  const RopeTable& table = *slice->table;
  const int64_t last = slice->start + slice->count - 1;
  volatile float sink = table.cos_row(slice->start)[0] + table.sin_row(last)[table.half() - 1];
  (void)sink;
}

void RunResolveConfig(const uint8_t* data, size_t size) {
  v1::RopeConfig request;
  if (!ParseCharged(&request, data, size)) return;
  absl::StatusOr<RopeConfig> config = ConfigFromProto(request);
  CheckRejection(config.status());
  if (!config.ok()) return;
  absl::StatusOr<ResolvedConfig> resolved = SharedEngine().ResolveConfig(*config);
  CheckRejection(resolved.status());
  if (!resolved.ok()) return;
  // An accepted config derives finite values only (else its tables and
  // replies would be NaN or Inf).
  for (double f : resolved->inv_freq) {
    if (!std::isfinite(f)) {
      std::fprintf(stderr, "an accepted config derives a non-finite inv_freq: %s\n",
                   resolved->key.ToString().c_str());
      std::abort();
    }
  }
  if (!std::isfinite(resolved->attention_factor)) {
    std::fprintf(stderr, "an accepted config derives a non-finite attention factor: %s\n",
                 resolved->key.ToString().c_str());
    std::abort();
  }
  // The explicit form must resolve to the same table.
  absl::StatusOr<ResolvedConfig> again = SharedEngine().ResolveConfig(resolved->config);
  CheckRejection(again.status());
  if (!again.ok() || !(again->key == resolved->key)) {
    std::fprintf(stderr, "the explicit form of a resolved config resolves differently: %s vs %s\n",
                 resolved->key.ToString().c_str(),
                 again.ok() ? again->key.ToString().c_str() : again.status().ToString().c_str());
    std::abort();
  }
}

// Registrations go to a registry of their own (small limits; file keys
// refused) and are unregistered at once, so inputs cannot pile up
// mappings; the request's checks and the engine's CUDA refusal run.
void RunRegisterSharedMemory(const uint8_t* data, size_t size) {
  v1::RegisterSharedMemoryRequest request;
  if (!ParseCharged(&request, data, size)) return;
  static ShmRegistry* registry = [] {
    ShmLimits limits;
    limits.max_regions_per_client = 2;
    limits.max_mapped_bytes = 1 << 20;
    return new ShmRegistry(limits);
  }();
  constexpr char kOwner[] = "fuzzer-register";
  const absl::Status status = AnswerRegisterSharedMemory(SharedEngine(), *registry, kOwner, request);
  CheckRejection(status);
  if (!status.ok()) return;
  v1::SharedMemoryStatusRequest ask;
  ask.set_name(request.name());
  v1::SharedMemoryStatusResponse regions;
  CheckRejection(AnswerSharedMemoryStatus(*registry, kOwner, ask, &regions));
  v1::UnregisterSharedMemoryRequest unregister;
  unregister.set_name(request.name());
  CheckRejection(AnswerUnregisterSharedMemory(*registry, kOwner, unregister));
}

// Positions are built within the engine's element limit and a 1 MiB reply.
void RunBuildPositions(const uint8_t* data, size_t size) {
  v1::BuildPositionsRequest request;
  if (!ParseCharged(&request, data, size)) return;
  v1::BuildPositionsResponse reply;
  CheckRejection(AnswerBuildPositions(SharedEngine(), request, ReplyLimit(1 << 20), &reply));
}

// A ModelInfer to a built-in model (rotate, attention), its configuration
// from the request's parameters (so hf_config_json and rope_scaling reach
// the config.json parser), tensors from raw bytes, typed contents or the
// fuzz region, as the KServe service runs it.
void RunModelInfer(const uint8_t* data, size_t size) {
  inference::ModelInferRequest request;
  if (!ParseCharged(&request, data, size)) return;
  static const kserve::ModelRepository* models = new kserve::ModelRepository();
  absl::StatusOr<const kserve::Model*> model =
      models->Find(request.model_name(), request.model_version());
  CheckRejection(model.status());
  if (!model.ok()) return;
  absl::StatusOr<kserve::InferPlan> plan = kserve::PlanModelInfer(
      **model, &request, SharedEngine().limits().max_elements_per_request);
  CheckRejection(plan.status());
  if (!plan.ok()) return;
  // As the service answers: the results in an InferReplyWriter, whose wire
  // bytes must be the size it announces and parse to the message built
  // from the same results.
  kserve::InferReplyWriter writer(kserve::InferReplyWriter::Form::kModelInferResponse);
  const absl::Status run =
      kserve::RunModelInfer(SharedEngine(), FuzzCall(), &*plan, writer.reply());
  CheckRejection(run);
  if (!run.ok()) return;
  kserve::InferReply copy = *writer.reply();
  inference::ModelInferResponse response;
  kserve::ToResponse(&copy, &response);
  const int64_t announced = writer.ReplyBytes();
  grpc::ByteBuffer wire;
  std::vector<grpc::Slice> slices;
  if (!writer.WriteReply(&wire).ok() || !wire.Dump(&slices).ok()) {
    std::fprintf(stderr, "ModelInfer reply of %lld bytes was not written\n",
                 static_cast<long long>(announced));
    std::abort();
  }
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  inference::ModelInferResponse parsed;
  if (static_cast<int64_t>(bytes.size()) != announced || !parsed.ParseFromString(bytes) ||
      !google::protobuf::util::MessageDifferencer::Equals(parsed, response)) {
    std::fprintf(stderr,
                 "ModelInfer reply's wire bytes (%zu, announced %lld) are not its message\n",
                 bytes.size(), static_cast<long long>(announced));
    std::abort();
  }
}

}  // namespace
}  // namespace fuzz
}  // namespace rope

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using rope::fuzz::RequestKind;
  if (size == 0) return 0;
  const uint8_t* message = data + 1;
  const size_t message_size = size - 1;
  switch (static_cast<RequestKind>(data[0] % rope::fuzz::kRequestKinds)) {
    case RequestKind::kRotate:
      rope::fuzz::RunRotate(message, message_size);
      break;
    case RequestKind::kAttention:
      rope::fuzz::RunAttention(message, message_size);
      break;
    case RequestKind::kGetTable:
      rope::fuzz::RunGetTable(message, message_size);
      break;
    case RequestKind::kResolveConfig:
      rope::fuzz::RunResolveConfig(message, message_size);
      break;
    case RequestKind::kRegisterSharedMemory:
      rope::fuzz::RunRegisterSharedMemory(message, message_size);
      break;
    case RequestKind::kBuildPositions:
      rope::fuzz::RunBuildPositions(message, message_size);
      break;
    case RequestKind::kModelInfer:
      rope::fuzz::RunModelInfer(message, message_size);
      break;
  }
  return 0;
}
