// Workload: the RPC ropeload drives and the request messages it sends.
//
// Payloads are built once, before the run, from the same flags and helpers
// as ropectl (--q/--random_q_shape, --dtype, --seed, the RoPE config flags),
// and are reused by every call: payload i uses seeds seed + 3i (q),
// seed + 3i + 1 (k) and seed + 3i + 2 (v), so payload 0 equals what ropectl
// sends with the same flags. Each call serialises its payload afresh (that
// is the client's marshal time).
//
// Immutable after construction; safe to share between threads.
#ifndef ROPE_CLIENT_LOAD_WORKLOAD_H_
#define ROPE_CLIENT_LOAD_WORKLOAD_H_

#include <memory>
#include <string>
#include <vector>

#include <google/protobuf/message.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/cli/flag_set.h"

namespace rope {
namespace load {

enum class WorkloadKind { kRotate, kRotateStream, kAttentionScores, kGetTable };

// "rotate" | "rotate_stream" | "scores" | "table", or the RPC names
// ("Rotate", "RotateStream", "AttentionScores", "GetTable"), any case.
absl::StatusOr<WorkloadKind> ParseWorkloadKind(absl::string_view name);
// The RPC name: "Rotate", "RotateStream", "AttentionScores", "GetTable".
absl::string_view WorkloadRpcName(WorkloadKind kind);

// What a run sends is a list of request variants: variant v is payload
// v % P (P = requests.size()) with RoPE config v / P. A step's n-th request
// sends variant n % variants().
//
// With one config (--configs=1, the default) every payload carries it and
// config_fields is empty. With --configs=N > 1 the payloads carry no config
// and config_fields[j] is config j serialized as the request's `config`
// field (tag, length, RopeConfig); each call appends it to its payload's
// bytes (protobuf reads fields in any order), so N configs cost N small
// strings, not N copies of the tensors. Config j is the flags' config with
// theta + j (theta 0 counting as its default, 10000): N distinct table-cache
// keys, for driving table builds and eviction.
struct Workload {
  WorkloadKind kind = WorkloadKind::kRotate;
  std::string method;  // "/rope.v1.RopeService/Rotate"
  std::vector<std::unique_ptr<google::protobuf::Message>> requests;  // the payloads
  std::vector<std::string> config_fields;  // see above; empty with one config
  std::unique_ptr<google::protobuf::Message> reply_prototype;        // New() per call
  std::string config_description;  // DescribeConfig of config 0 (and the configs' range)
  std::string payload_description;  // "q float32 [1,16,8,64] (random normal, seed 0), ..."
  int64_t request_bytes = 0;        // serialized size of variant 0

  bool streaming() const { return kind == WorkloadKind::kRotateStream; }

  // Preconditions below: 0 <= variant < variants().
  int variants() const;
  const google::protobuf::Message& payload(int variant) const;
  // The bytes to append to payload(variant)'s serialization; empty with one
  // config.
  absl::string_view config_field(int variant) const;
  // The whole request of `variant`, as the server parses it (for --verify).
  std::unique_ptr<google::protobuf::Message> Request(int variant) const;
};

// Declares the workload flags: --workload, --payloads, --configs, the inputs (--q, --k,
// --v, --random_*_shape, --dtype, --seed, --distribution), the RoPE config
// flags of ropectl (common_flags.h, scaling included) and each RPC's own
// fields (--start_pos, --positions, --fractional_positions, --grid, --inverse;
// --q_start_pos, --k_start_pos,
// --causal, --softmax, --scale; --table_start, --table_count).
void AddWorkloadFlags(client::FlagSet* flags);

// Builds the payloads. A usage error (client::IsUsageError) for a bad
// combination of flags; the file's error for an unreadable .npy input.
absl::StatusOr<Workload> WorkloadFromFlags(const client::FlagSet& flags);

}  // namespace load
}  // namespace rope

#endif  // ROPE_CLIENT_LOAD_WORKLOAD_H_
