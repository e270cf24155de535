// ropectl info and ropectl health: questions about the server itself.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/cli/commands.h"
#include "client/flags/common_flags.h"
#include "client/flags/summary.h"
#include "common/status_macros.h"

namespace rope {
namespace client {
namespace {

void AddInfoFlags(FlagSet* flags) { AddConnectionFlags(flags); }

absl::Status RunInfo(const FlagSet& flags, std::ostream& out) {
  ROPE_ASSIGN_OR_RETURN(std::unique_ptr<RopeClient> client, ClientFromFlags(flags));
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::ServerInfo> info = client->GetServerInfo();
  const absl::Duration elapsed = absl::Now() - start;
  if (!info.ok()) return info.status();
  const v1::ServerLimits& limits = info->limits();
  const v1::TableCacheStats& cache = info->table_cache();
  out << "server  " << flags.String("target") << "\n"
      << "  version:  " << info->version() << "\n"
      << "  backend:  " << info->backend() << "  (" << info->device() << ")\n"
      << "  threads:  " << info->threads() << "\n";
  if (!info->cpu_simd().empty()) out << "  cpu simd: " << info->cpu_simd() << "\n";
  out << "  dtypes:   " << absl::StrJoin(info->supported_dtypes(), ", ") << "\n"
      << "  scalings: " << absl::StrJoin(info->supported_scalings(), ", ") << "\n";
  if (info->supported_attention_results_size() > 0) {
    out << "  attention: results " << absl::StrJoin(info->supported_attention_results(), ", ")
        << "; masks " << absl::StrJoin(info->supported_attention_masks(), ", ")
        << "; transforms " << absl::StrJoin(info->supported_attention_transforms(), ", ")
        << "\n";
  }
  out << "  limits:   max_message_bytes=" << limits.max_message_bytes()
      << " max_len_cap=" << limits.max_len_cap()
      << " max_elements_per_request=" << limits.max_elements_per_request()
      << " max_concurrent_calls=" << limits.max_concurrent_calls()
      << " table_cache_bytes=" << limits.table_cache_bytes()
      << " max_table_blocks_per_call=" << limits.max_table_blocks_per_call()
      << " max_inflight_bytes=" << limits.max_inflight_bytes()
      << " shm_max_regions_per_client=" << limits.shm_max_regions_per_client()
      << " shm_max_mapped_bytes=" << limits.shm_max_mapped_bytes()
      << " shm_max_mapped_bytes_per_client=" << limits.shm_max_mapped_bytes_per_client()
      << " max_streams_per_client=" << limits.max_streams_per_client()
      << " stream_idle_timeout_ms=" << limits.stream_idle_timeout_ms()
      << " max_inflight_bytes_per_client=" << limits.max_inflight_bytes_per_client() << "\n"
      << "  table cache: blocks of " << cache.block_rows() << " rows, resident="
      << cache.blocks_resident() << " bytes=" << cache.bytes() << "/" << cache.budget_bytes()
      << " built=" << cache.blocks_built() << " hits=" << cache.hits()
      << " misses=" << cache.misses() << " evicted=" << cache.blocks_evicted() << "\n"
      << "  elapsed " << FormatMillis(elapsed) << "\n";
  return absl::OkStatus();
}

void AddHealthFlags(FlagSet* flags) {
  AddConnectionFlags(flags);
  flags->BeginGroup("Health");
  flags->Add("service", FlagSet::Kind::kString, "",
             "Service name to check; empty means the whole server.");
}

absl::Status RunHealth(const FlagSet& flags, std::ostream& out) {
  // Without the channel's own health watch: it would hide a NOT_SERVING
  // (draining) server behind "UNAVAILABLE: backend unhealthy".
  ROPE_ASSIGN_OR_RETURN(std::unique_ptr<RopeClient> client,
                        ClientFromFlags(flags, /*health_check=*/false));
  ROPE_ASSIGN_OR_RETURN(RopeClient::ServingStatus status, client->Health(flags.String("service")));
  out << ServingStatusName(status) << "\n";
  if (status != grpc::health::v1::HealthCheckResponse::SERVING) {
    return absl::UnavailableError(
        absl::StrCat(flags.String("target"), " reports ", ServingStatusName(status)));
  }
  return absl::OkStatus();
}

}  // namespace

extern const Command kInfoCommand = {
    "info",
    "Print the server's version, backend, limits and table-cache statistics",
    "Calls RopeService.GetServerInfo and prints it readably.",
    AddInfoFlags,
    RunInfo,
};

extern const Command kHealthCommand = {
    "health",
    "grpc.health.v1 Check: prints SERVING / NOT_SERVING; exit 0 only if SERVING",
    "Calls grpc.health.v1.Health/Check and prints the status. Exits 0 when it\n"
    "is SERVING, 1 otherwise (including when the server cannot be reached).",
    AddHealthFlags,
    RunHealth,
};

}  // namespace client
}  // namespace rope
