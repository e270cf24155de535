#include "client/load/verifier.h"

#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/tensor_util.h"
#include "common/status_macros.h"
#include "core/proto_engine/rope_calls.h"
#include "rope/v1/rope.pb.h"

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
  ROPE_ASSIGN_OR_RETURN(std::vector<float> g, client::TensorToFloats(got, what));
  ROPE_ASSIGN_OR_RETURN(std::vector<float> w, client::TensorToFloats(want, what));
  for (size_t i = 0; i < g.size(); ++i) {
    const double a = g[i];
    const double b = w[i];
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

}  // namespace

absl::StatusOr<std::unique_ptr<Verifier>> Verifier::Create(const Workload* workload) {
  // Limits far above any server's: the oracle answers whatever the server
  // accepted; the server's own limits are the server's to enforce.
  EngineLimits limits;
  limits.max_len_cap = 1u << 24;
  limits.max_elements_per_request = int64_t{1} << 30;
  ROPE_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, NewLocalCpuEngine(1, limits));
  return std::unique_ptr<Verifier>(new Verifier(workload, std::move(engine)));
}

absl::StatusOr<Verifier::Expected> Verifier::Compute(int payload) const {
  // A fresh copy of the request: AnswerRotate consumes it.
  const std::unique_ptr<google::protobuf::Message> request = workload_->Request(payload);
  switch (workload_->kind) {
    case WorkloadKind::kRotate:
    case WorkloadKind::kRotateStream: {
      auto reply = std::make_unique<v1::RotateResponse>();
      ROPE_RETURN_IF_ERROR(
          AnswerRotate(*engine_, static_cast<v1::RotateRequest*>(request.get()), reply.get()));
      return Expected(std::move(reply));
    }
    case WorkloadKind::kAttentionScores: {
      auto reply = std::make_unique<v1::AttentionScoresResponse>();
      ROPE_RETURN_IF_ERROR(AnswerAttentionScores(
          *engine_, static_cast<const v1::AttentionScoresRequest&>(*request), reply.get()));
      return Expected(std::move(reply));
    }
    case WorkloadKind::kGetTable: {
      auto reply = std::make_unique<v1::GetTableResponse>();
      // No message limit: the server checks its own.
      ROPE_RETURN_IF_ERROR(AnswerGetTable(*engine_,
                                          static_cast<const v1::GetTableRequest&>(*request),
                                          ReplyLimit(), reply.get()));
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
      ROPE_ASSIGN_OR_RETURN(Expected computed, Compute(payload));
      it = expected_.emplace(payload, std::move(computed)).first;
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
      if (w.has_scores() || g.has_scores()) {
        status = CompareTensors("scores", g.scores(), w.scores(), kScoresTolerance, &check);
      }
      if (status.ok() && (w.has_output() || g.has_output())) {
        status = CompareTensors("output", g.output(), w.output(), kScoresTolerance, &check);
      }
      if (status.ok() && (w.has_lse() || g.has_lse())) {
        status = CompareTensors("lse", g.lse(), w.lse(), kScoresTolerance, &check);
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
