// ropectl rotate: RopeService.Rotate on .npy or random q/k.
#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/cli/axial_flags.h"
#include "client/cli/cli_parsing.h"
#include "client/cli/commands.h"
#include "client/cli/common_flags.h"
#include "client/cli/summary.h"
#include "client/shared_region.h"
#include "common/status_macros.h"

namespace rope {
namespace client {
namespace {

absl::Status ValidatePositions(absl::string_view value) {
  return ParseInt64List(value).status();
}

// --shm: q (and k) travel through a shared-memory region this process
// creates and registers for the call (same host only), rotated there in
// place; the reply's references are read back into bytes so that the
// output is the bytes path's.
absl::StatusOr<v1::RotateResponse> RotateBySharedMemory(RopeClient& client,
                                                        v1::RotateRequest request) {
  const size_t q_bytes = request.q().data().size();
  const size_t k_offset = (q_bytes + 63) / 64 * 64;
  const size_t k_bytes = request.has_k() ? request.k().data().size() : 0;
  ROPE_ASSIGN_OR_RETURN(std::unique_ptr<SharedRegion> region,
                        SharedRegion::Create("ropectl", std::max<size_t>(k_offset + k_bytes, 1)));
  std::memcpy(region->data(), request.q().data().data(), q_bytes);
  request.mutable_q()->clear_data();
  *request.mutable_q()->mutable_shm() = region->Ref(0, q_bytes);
  if (request.has_k()) {
    std::memcpy(region->data() + k_offset, request.k().data().data(), k_bytes);
    request.mutable_k()->clear_data();
    *request.mutable_k()->mutable_shm() = region->Ref(k_offset, k_bytes);
  }
  ROPE_RETURN_IF_ERROR(client.RegisterSharedMemory(*region));
  absl::StatusOr<v1::RotateResponse> reply = client.Rotate(request);
  const absl::Status unregistered = client.UnregisterSharedMemory(region->name());
  if (!reply.ok()) return reply.status();
  ROPE_RETURN_IF_ERROR(unregistered);
  reply->mutable_q()->clear_shm();
  reply->mutable_q()->set_data(region->data(), q_bytes);
  if (request.has_k()) {
    reply->mutable_k()->clear_shm();
    reply->mutable_k()->set_data(region->data() + k_offset, k_bytes);
  }
  return reply;
}

void AddRotateFlags(FlagSet* flags) {
  AddConnectionFlags(flags);
  AddRopeConfigFlags(flags);
  flags->BeginGroup("Inputs");
  AddDTypeFlag(flags);
  flags->Add("q", FlagSet::Kind::kString, "",
             "Query .npy file, [B,S,Hq,D] or [S,Hq,D]. This or --random_q_shape is required.");
  flags->Add("k", FlagSet::Kind::kString, "",
             "Optional key .npy file, [B,S,Hkv,D] (Hkv may differ from Hq: GQA/MQA).");
  flags->Add("random_q_shape", FlagSet::Kind::kString, "",
             "Random q of this shape instead of --q, e.g. 1,16,8,64.", ValidateOptionalShape);
  flags->Add("random_k_shape", FlagSet::Kind::kString, "",
             "Random k of this shape instead of --k, e.g. 1,16,2,64.", ValidateOptionalShape);
  AddRandomFlags(flags);
  flags->BeginGroup("Positions");
  flags->Add("start_pos", FlagSet::Kind::kInt, "0",
             "Token s of every batch row sits at position start_pos + s.");
  flags->Add("positions", FlagSet::Kind::kString, "",
             "Explicit positions instead of --start_pos: S values (shared by every "
             "batch row) or B*S values (row-major [B,S]), e.g. 0,1,2,7 (M-RoPE and axial: "
             "times the axes, [axis][b][s]).",
             ValidatePositions);
  AddPositionSourceFlags(flags);
  flags->Add("inverse", FlagSet::Kind::kBool, "false",
             "Rotate by -angle (undo a rotation).");
  flags->BeginGroup("Outputs");
  flags->Add("out_q", FlagSet::Kind::kString, "", "Write the rotated q to this .npy file.");
  flags->Add("out_k", FlagSet::Kind::kString, "", "Write the rotated k to this .npy file.");
  AddSaveInputsFlag(flags);
  flags->Add("shm", FlagSet::Kind::kBool, "false",
             "Send q and k by reference through a POSIX shared-memory region (server on "
             "this host; --target=unix:///path or 127.0.0.1) instead of as bytes.");
}

absl::Status RunRotate(const FlagSet& flags, std::ostream& out) {
  // Before any input is generated or any call made: a result that could not
  // be written, or a request too large to send, fails at once.
  ROPE_RETURN_IF_ERROR(CheckOutputsWritable(flags, {"out_q", "out_k"}));
  const int64_t input_bytes = InputBytesBeforeLoading(flags, "q", "random_q_shape") +
                              InputBytesBeforeLoading(flags, "k", "random_k_shape");
  ROPE_RETURN_IF_ERROR(CheckMessageFits("the Rotate request (q and k)", input_bytes));
  ROPE_ASSIGN_OR_RETURN(std::optional<InputTensor> q,
                        LoadInputTensor(flags, "q", "random_q_shape", 0));
  if (!q.has_value()) return UsageError("give --q=file.npy or --random_q_shape=B,S,H,D");
  ROPE_ASSIGN_OR_RETURN(std::optional<InputTensor> k,
                        LoadInputTensor(flags, "k", "random_k_shape", 1));
  if (flags.IsSet("positions") && flags.IsSet("start_pos")) {
    return UsageError("give --start_pos or --positions, not both");
  }
  if (!k.has_value() && !flags.String("out_k").empty()) {
    return UsageError("--out_k given but there is no k (--k or --random_k_shape)");
  }
  const v1::Tensor& q_tensor = q->tensor;
  std::string defaults_note;
  ROPE_ASSIGN_OR_RETURN(v1::RopeConfig config,
                        RopeConfigFromFlags(flags, q_tensor.shape(q_tensor.shape_size() - 1),
                                            &defaults_note));

  v1::RotateRequest request;
  *request.mutable_config() = config;
  *request.mutable_q() = q_tensor;
  if (k.has_value()) *request.mutable_k() = k->tensor;
  request.set_start_pos(flags.Int("start_pos"));
  absl::StatusOr<std::vector<int64_t>> positions = ParseInt64List(flags.String("positions"));
  if (!positions.ok()) return UsageError(positions.status().message());
  for (int64_t p : *positions) request.add_positions(p);
  ROPE_RETURN_IF_ERROR(ApplyPositionSourceFlags(flags, &request));
  request.set_inverse(flags.Bool("inverse"));

  ROPE_RETURN_IF_ERROR(SaveInputsIfAsked(flags, q, k, std::nullopt, out));
  ROPE_ASSIGN_OR_RETURN(std::unique_ptr<RopeClient> client, ClientFromFlags(flags));
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::RotateResponse> response =
      flags.Bool("shm") ? RotateBySharedMemory(*client, request) : client->Rotate(request);
  const absl::Duration elapsed = absl::Now() - start;
  if (!response.ok()) {
    return ExplainHfHeadDimMismatch(response.status(), flags,
                                    q_tensor.shape(q_tensor.shape_size() - 1));
  }

  out << "rotate  " << flags.String("target") << (flags.Bool("shm") ? "  (shared memory)" : "")
      << "  " << DescribeEffectiveConfig(*client, config)
      << (request.inverse() ? "  inverse" : "") << "\n";
  if (!defaults_note.empty()) out << "  from the config.json: " << defaults_note << "\n";
  if (!DescribePositionSource(flags).empty()) {
    out << "  " << DescribePositionSource(flags) << "\n";
  } else if (positions->empty()) {
    out << "  positions: start_pos=" << request.start_pos() << "\n";
  } else {
    out << "  positions: " << absl::StrJoin(*positions, ",") << "\n";
  }
  out << "  q in : " << ShapeAndDType(q_tensor) << "  from " << q->source << "\n";
  absl::StatusOr<std::string> summary = SummarizeTensor(response->q(), "reply q");
  if (!summary.ok()) return summary.status();
  out << "  q out: " << *summary << "\n";
  if (k.has_value()) {
    out << "  k in : " << ShapeAndDType(k->tensor) << "  from " << k->source << "\n";
    summary = SummarizeTensor(response->k(), "reply k");
    if (!summary.ok()) return summary.status();
    out << "  k out: " << *summary << "\n";
  }
  out << "  elapsed " << FormatMillis(elapsed) << "\n";
  ROPE_RETURN_IF_ERROR(WriteOutputIfAsked(flags, "out_q", response->q(), out));
  if (k.has_value()) return WriteOutputIfAsked(flags, "out_k", response->k(), out);
  return absl::OkStatus();
}

}  // namespace

extern const Command kRotateCommand = {
    "rotate",
    "Rotate q (and k) by their positions (RopeService.Rotate)",
    "Sends q (and optionally k) with a RoPE config and positions; prints the\n"
    "shapes, dtype and statistics of the rotated tensors and the round-trip\n"
    "time, and writes them as .npy when --out_q / --out_k are given. The reply\n"
    "has the dtype that was sent.",
    AddRotateFlags,
    RunRotate,
};

}  // namespace client
}  // namespace rope
