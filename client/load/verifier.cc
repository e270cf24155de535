#include "client/load/verifier.h"

#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/tensor_util.h"
#include "rope/v1/rope.pb.h"
#include "server/backends/cpu/cpu_backend.h"
#include "server/service/request_conversion.h"

namespace rope {
namespace load {
namespace {

struct Tolerance {
  double atol;
  double rtol;
};

// Rotation: float32 within a few ulps (FMA or not); float16 / bfloat16
// within two of their ulps, as rounding the float32 result may go either
// way when the two sides differ in the last float32 bit.
Tolerance RotateTolerance(v1::DType dtype) {
  switch (dtype) {
    case v1::FLOAT16: return {1e-3, 2e-3};
    case v1::BFLOAT16: return {1e-2, 1.6e-2};
    default: return {1e-5, 1e-5};
  }
}
// Scores sum D products in an order the backend chooses.
constexpr Tolerance kScoresTolerance = {1e-4, 1e-4};
constexpr Tolerance kTableTolerance = {1e-7, 1e-6};

absl::Status CompareTensors(absl::string_view what, const v1::Tensor& got,
                            const v1::Tensor& want, Tolerance tol, VerifyCheck* check) {
  if (got.dtype() != want.dtype() ||
      !std::equal(got.shape().begin(), got.shape().end(), want.shape().begin(),
                  want.shape().end())) {
    check->match = false;
    if (check->detail.empty()) {
      check->detail = absl::StrCat(what, ": got ", client::DTypeName(got.dtype()), " [",
                                   absl::StrJoin(got.shape(), ","), "], want ",
                                   client::DTypeName(want.dtype()), " [",
                                   absl::StrJoin(want.shape(), ","), "]");
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<float>> g = client::TensorToFloats(got, what);
  if (!g.ok()) return g.status();
  absl::StatusOr<std::vector<float>> w = client::TensorToFloats(want, what);
  if (!w.ok()) return w.status();
  for (size_t i = 0; i < g->size(); ++i) {
    const double a = (*g)[i];
    const double b = (*w)[i];
    if (a == b || (std::isnan(a) && std::isnan(b))) continue;
    const double diff = std::fabs(a - b);
    if (std::isfinite(diff)) check->max_abs_error = std::max(check->max_abs_error, diff);
    if (!(diff <= tol.atol + tol.rtol * std::fabs(b))) {
      if (check->detail.empty()) {
        check->detail = absl::StrCat(what, "[", i, "] is ", a, ", the local engine says ", b);
      }
      check->match = false;
    }
  }
  return absl::OkStatus();
}

v1::Tensor Float32Tensor(std::string bytes, const std::vector<int64_t>& shape) {
  v1::Tensor t;
  t.set_dtype(v1::FLOAT32);
  for (int64_t d : shape) t.add_shape(d);
  *t.mutable_data() = std::move(bytes);
  return t;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Verifier>> Verifier::Create(const Workload* workload) {
  absl::StatusOr<std::unique_ptr<Backend>> backend = NewCpuBackend(1);
  if (!backend.ok()) return backend.status();
  EngineLimits limits;
  limits.max_len_cap = 1u << 24;
  limits.max_elements_per_request = int64_t{1} << 30;
  return std::unique_ptr<Verifier>(
      new Verifier(workload, std::make_unique<Engine>(*std::move(backend), limits)));
}

absl::StatusOr<Verifier::Expected> Verifier::Compute(int payload) const {
  const std::unique_ptr<google::protobuf::Message> whole = workload_->Request(payload);
  const google::protobuf::Message& request = *whole;
  switch (workload_->kind) {
    case WorkloadKind::kRotate:
    case WorkloadKind::kRotateStream: {
      v1::RotateRequest copy = static_cast<const v1::RotateRequest&>(request);
      absl::StatusOr<RotateParams> params = RotateParamsFromProto(&copy);
      if (!params.ok()) return params.status();
      absl::Status status = engine_->Rotate(*params);
      if (!status.ok()) return status;
      auto reply = std::make_unique<v1::RotateResponse>();
      *reply->mutable_q() = std::move(*copy.mutable_q());
      if (copy.has_k()) *reply->mutable_k() = std::move(*copy.mutable_k());
      return Expected(std::move(reply));
    }
    case WorkloadKind::kAttentionScores: {
      const auto& r = static_cast<const v1::AttentionScoresRequest&>(request);
      absl::StatusOr<AttentionParams> params = AttentionParamsFromProto(r);
      if (!params.ok()) return params.status();
      std::string scores, output;
      AttentionOutputs outputs;
      outputs.scores = &scores;
      if (r.has_v()) outputs.output = &output;
      absl::Status status = engine_->AttentionScores(*params, &outputs);
      if (!status.ok()) return status;
      auto reply = std::make_unique<v1::AttentionScoresResponse>();
      *reply->mutable_scores() = Float32Tensor(std::move(scores), outputs.scores_shape);
      if (r.has_v()) *reply->mutable_output() = Float32Tensor(std::move(output), outputs.output_shape);
      return Expected(std::move(reply));
    }
    case WorkloadKind::kGetTable: {
      const auto& r = static_cast<const v1::GetTableRequest&>(request);
      absl::StatusOr<RopeConfig> config = ConfigFromProto(r.config());
      if (!config.ok()) return config.status();
      absl::StatusOr<TableSlice> slice = engine_->GetTable(*config, r.start(), r.count());
      if (!slice.ok()) return slice.status();
      const RopeTable& table = *slice->table;
      const size_t bytes = static_cast<size_t>(slice->count) * table.half() * sizeof(float);
      const std::vector<int64_t> shape = {slice->count, table.half()};
      auto reply = std::make_unique<v1::GetTableResponse>();
      *reply->mutable_cos() = Float32Tensor(
          std::string(reinterpret_cast<const char*>(table.cos_row(slice->start)), bytes), shape);
      *reply->mutable_sin() = Float32Tensor(
          std::string(reinterpret_cast<const char*>(table.sin_row(slice->start)), bytes), shape);
      reply->mutable_inv_freq()->Assign(table.inv_freq().begin(), table.inv_freq().end());
      reply->set_attention_factor(table.attention_factor());
      reply->set_start(slice->start);
      return Expected(std::move(reply));
    }
  }
  return absl::InternalError("unknown workload");
}

absl::StatusOr<VerifyCheck> Verifier::Check(int payload, const google::protobuf::Message& reply) {
  const google::protobuf::Message* want = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto it = expected_.find(payload);
    if (it == expected_.end()) {
      absl::StatusOr<Expected> computed = Compute(payload);
      if (!computed.ok()) return computed.status();
      it = expected_.emplace(payload, *std::move(computed)).first;
    }
    want = it->second.get();  // entries are never removed
  }
  VerifyCheck check;
  check.match = true;
  absl::Status status;
  switch (workload_->kind) {
    case WorkloadKind::kRotate:
    case WorkloadKind::kRotateStream: {
      const auto& g = static_cast<const v1::RotateResponse&>(reply);
      const auto& w = static_cast<const v1::RotateResponse&>(*want);
      status = CompareTensors("q", g.q(), w.q(), RotateTolerance(w.q().dtype()), &check);
      if (status.ok() && (w.has_k() || g.has_k())) {
        status = CompareTensors("k", g.k(), w.k(), RotateTolerance(w.k().dtype()), &check);
      }
      break;
    }
    case WorkloadKind::kAttentionScores: {
      const auto& g = static_cast<const v1::AttentionScoresResponse&>(reply);
      const auto& w = static_cast<const v1::AttentionScoresResponse&>(*want);
      status = CompareTensors("scores", g.scores(), w.scores(), kScoresTolerance, &check);
      if (status.ok() && (w.has_output() || g.has_output())) {
        status = CompareTensors("output", g.output(), w.output(), kScoresTolerance, &check);
      }
      break;
    }
    case WorkloadKind::kGetTable: {
      const auto& g = static_cast<const v1::GetTableResponse&>(reply);
      const auto& w = static_cast<const v1::GetTableResponse&>(*want);
      status = CompareTensors("cos", g.cos(), w.cos(), kTableTolerance, &check);
      if (status.ok()) status = CompareTensors("sin", g.sin(), w.sin(), kTableTolerance, &check);
      if (status.ok() && g.start() != w.start() && check.detail.empty()) {
        check.match = false;
        check.detail = absl::StrCat("start is ", g.start(), ", the local engine says ", w.start());
      }
      break;
    }
  }
  if (!status.ok()) return status;
  return check;
}

}  // namespace load
}  // namespace rope
