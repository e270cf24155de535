#include "client/load/ropeload_command.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/time/time.h"
#include "client/cli/common_flags.h"
#include "client/cli/flag_set.h"
#include "client/load/channel_pool.h"
#include "client/load/load_flags.h"
#include "client/load/progress.h"
#include "client/load/report.h"
#include "client/load/shm_payloads.h"
#include "client/load/step_runner.h"
#include "client/load/verifier.h"
#include "client/load/workload.h"
#include "client/transport_errors.h"

namespace rope {
namespace load {
namespace {

constexpr char kUsage[] =
    R"(ropeload: load generator for ropeserve (rope.v1.RopeService).

Drives one RPC (Rotate, RotateStream, AttentionScores or GetTable) with
payloads built once from a seed, in a closed loop (--concurrency workers, one
request in flight each) or an open loop (--rps, constant or --poisson
arrivals), for --duration or --requests per step, optionally sweeping
--concurrency_range or --rps_range and stopping at --max_p99. Latencies go to
an HDR histogram (within 0.4%); the report has p50/p90/p95/p99/p99.9/max,
mean, stddev, req/s, MB/s, errors by status code, windows with a stability
verdict, and the client's marshal time vs its wait for the server.

Usage:
  ropeload --target=HOST:PORT [flags]
Examples:
  ropeload --target=localhost:50051 --random_q_shape=1,1,32,128 -c 8 -z 10s
  ropeload --workload=scores --random_q_shape=1,128,8,64 --random_k_shape=1,128,8,64 \
      --causal --rps=200 --poisson --duration=30s --html=report.html
  ropeload --random_q_shape=1,2048,32,128 --concurrency-range=1:32:x2 \
      --max-p99=50ms --warmup=2s --json=sweep.json --html=sweep.html
Flag names take '-' or '_' alike (--max-p99 = --max_p99). Unlike ropectl,
ropeload does not retry unless --max_attempts > 1: --deadline bounds each call
(each stream for rotate_stream) and every failure is counted.

Exit status: 0 the run finished with failed calls / measured calls at most
--max_error_rate (default 0: no failed call); 1 no server, a report could not
be written, or a --verify mismatch; 2 bad command line; 3 more calls failed
than --max_error_rate allows (the summary says how many).
--version prints the version.
)";

void ReportError(const absl::Status& status, std::ostream& err) {
  err << "ropeload: "
      << absl::StrReplaceAll(
             absl::StrCat(absl::StatusCodeToString(status.code()), ": ", status.message()),
             {{"\n", " "}, {"\r", " "}})
      << "\n";
}

absl::Status WriteFile(const std::string& path, const std::string& content) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open for writing"));
  file << content;
  file.close();
  if (!file) return absl::DataLossError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

// Whether `path` can be written, checked before the run rather than after
// it: an existing file must be writable, a new one creatable (it is made and
// removed again).
absl::Status CheckWritable(absl::string_view flag, const std::string& path) {
  if (path.empty()) return absl::OkStatus();
  const bool existed = access(path.c_str(), F_OK) == 0;
  {
    std::ofstream probe(path, std::ios::binary | std::ios::app);
    if (!probe) {
      return client::UsageError(absl::StrCat("--", flag, "=", path, ": cannot write there (",
                                             std::strerror(errno), ")"));
    }
  }
  if (!existed) std::remove(path.c_str());
  return absl::OkStatus();
}

std::string StepLabel(const StepPlan& plan, size_t index, size_t count) {
  std::string label = plan.open_loop() ? absl::StrFormat("%g rps", plan.rps)
                                       : absl::StrFormat("c=%d", plan.concurrency);
  if (count > 1) label = absl::StrCat("step ", index + 1, "/", count, " ", label);
  return label;
}

// Everything a run needs, made from the command line before any load.
struct RunSetup {
  LoadSpec spec;
  Workload workload;
  std::unique_ptr<ChannelPool> pool;
  v1::ServerInfo server;                // what Connect's GetServerInfo said
  std::unique_ptr<Verifier> verifier;  // null without --verify
  // --shm: the payloads' region; declared after `pool`, so unregistered
  // (destroyed) before the channels close.
  std::unique_ptr<RegisteredPayloads> shm;
};

// Setup: the load spec and the workload from `flags`, the channels, a first
// call to the server and, for --verify, the local oracle. kExitOk, or the
// exit code once the error is reported on `err`.
int SetUpRun(const client::FlagSet& flags, std::ostream& err, RunSetup* setup) {
  absl::StatusOr<LoadSpec> spec = LoadSpecFromFlags(flags);
  if (!spec.ok()) {
    ReportError(spec.status(), err);
    return kExitUsage;
  }
  setup->spec = *std::move(spec);
  for (absl::Status writable : {CheckWritable("json", setup->spec.json_path),
                                CheckWritable("csv", setup->spec.csv_path),
                                CheckWritable("html", setup->spec.html_path)}) {
    if (!writable.ok()) {
      ReportError(writable, err);
      return kExitUsage;
    }
  }
  absl::StatusOr<Workload> workload = WorkloadFromFlags(flags);
  if (!workload.ok()) {
    ReportError(workload.status(), err);
    return client::IsUsageError(workload.status()) ? kExitUsage : kExitFailure;
  }
  setup->workload = *std::move(workload);

  client::ClientOptions options;
  // Only Connect's GetServerInfo uses this deadline (the load's calls take
  // --deadline): a tiny --deadline should fail load calls, not the start.
  options.deadline = std::max(setup->spec.deadline, absl::Seconds(10));
  // 1 by default: every failure is counted, none hidden by a retry.
  options.retry_max_attempts = setup->spec.max_attempts;
  absl::Status security = client::ApplySecurityFlags(setup->spec.security, &options);
  if (!security.ok()) {
    ReportError(security, err);
    return client::IsUsageError(security) ? kExitUsage : kExitFailure;
  }
  absl::StatusOr<std::unique_ptr<ChannelPool>> pool =
      ChannelPool::Create(setup->spec.target, options, setup->spec.connections);
  if (!pool.ok()) {
    ReportError(pool.status(), err);
    return kExitFailure;
  }
  setup->pool = *std::move(pool);
  absl::StatusOr<v1::ServerInfo> info = setup->pool->Connect();
  if (!info.ok()) {
    const absl::Status explained =
        client::ExplainTransportFailure(info.status(), setup->spec.security, setup->spec.target);
    ReportError(absl::Status(explained.code(), absl::StrCat("cannot use ", setup->spec.target,
                                                            ": ", explained.message())),
                err);
    return kExitFailure;
  }
  setup->server = *std::move(info);
  // The summary shows the scaling parameters the server uses (its defaults
  // and a config.json's values), not the zeros sent.
  // (With --configs the description keeps naming the range of configs.)
  if (!setup->workload.requests.empty() && setup->workload.config_fields.empty()) {
    const std::unique_ptr<google::protobuf::Message> first = setup->workload.Request(0);
    const auto* config = dynamic_cast<const v1::RopeConfig*>(&first->GetReflection()->GetMessage(
        *first, first->GetDescriptor()->FindFieldByName("config")));
    if (config != nullptr && (!config->hf_config_json().empty() ||
                              config->scaling_case() != v1::RopeConfig::SCALING_NOT_SET)) {
      setup->workload.config_description =
          client::DescribeEffectiveConfig(setup->pool->client(0), *config);
    }
  }
  if (flags.Bool("shm")) {
    if (setup->spec.verify > 0) {
      ReportError(client::UsageError("--shm and --verify do not go together (calls in flight "
                                      "rotate shared bytes in place)"),
                  err);
      return kExitUsage;
    }
    absl::StatusOr<std::unique_ptr<RegisteredPayloads>> shm =
        MovePayloadsToSharedMemory(&setup->workload, *setup->pool);
    if (!shm.ok()) {
      ReportError(shm.status(), err);
      return client::IsUsageError(shm.status()) ? kExitUsage : kExitFailure;
    }
    setup->shm = *std::move(shm);
  }
  if (setup->spec.verify > 0) {
    absl::StatusOr<std::unique_ptr<Verifier>> verifier = Verifier::Create(&setup->workload);
    if (!verifier.ok()) {
      ReportError(verifier.status(), err);
      return kExitFailure;
    }
    setup->verifier = *std::move(verifier);
  }
  return kExitOk;
}

// Sweep: runs the steps in order, stopping after the first one that misses
// the --max_p99 SLO, and returns the whole run's report.
RunReport Sweep(RunSetup& setup) {
  const LoadSpec& spec = setup.spec;
  RunReport report;
  report.target = spec.target;
  report.workload = std::string(WorkloadRpcName(setup.workload.kind));
  report.config = setup.workload.config_description;
  report.payload = setup.workload.payload_description;
  report.request_bytes = setup.workload.request_bytes;
  report.server = absl::StrCat("ropeserve ", setup.server.version(), ", backend ",
                               setup.server.backend(), " (", setup.server.device(), ")");
  report.spec = spec;
  report.verify.requested = 0;

  Progress progress(stderr, spec.progress);
  for (size_t i = 0; i < spec.steps.size(); ++i) {
    StepContext context;
    context.spec = &spec;
    context.workload = &setup.workload;
    context.pool = setup.pool.get();
    context.verifier = setup.verifier.get();
    context.verify_budget = spec.verify;
    context.progress = &progress;
    context.label = StepLabel(spec.steps[i], i, spec.steps.size());
    report.steps.push_back(RunStep(context, spec.steps[i]));
    const StepResult& step = report.steps.back();
    report.verify.requested += step.verify.requested;
    report.verify.checked += step.verify.checked;
    report.verify.matched += step.verify.matched;
    report.verify.max_abs_error = std::max(report.verify.max_abs_error, step.verify.max_abs_error);
    for (const std::string& f : step.verify.failures) report.verify.failures.push_back(f);

    if (spec.max_p99 > absl::ZeroDuration()) {
      const double limit_ms = absl::ToDoubleMilliseconds(spec.max_p99);
      const double p99 = step.latency_summary.p99_ms;
      const bool broken = step.latency_summary.count == 0 || p99 > limit_ms;
      if (broken) {
        report.slo_note = step.latency_summary.count == 0
                              ? absl::StrFormat("no OK calls at %s: SLO p99 <= %g ms not met",
                                                StepLabel(step.plan, 0, 1), limit_ms)
                              : absl::StrFormat("p99 %.3f ms at %s exceeds the SLO %g ms",
                                                p99, StepLabel(step.plan, 0, 1), limit_ms);
        if (i + 1 < spec.steps.size()) {
          report.slo_stopped = true;
          absl::StrAppend(&report.slo_note, "; sweep stopped after ", i + 1, " of ",
                          spec.steps.size(), " steps");
        }
        break;
      }
      report.slo_note = absl::StrFormat("every step met p99 <= %g ms", limit_ms);
    }
  }
  progress.Clear();
  for (const StepResult& step : report.steps) {
    report.calls += step.ok + step.errors;
    report.failed_calls += step.errors;
  }
  report.error_rate_exceeded =
      report.failed_calls > 0 &&
      static_cast<double>(report.failed_calls) > spec.max_error_rate * report.calls;
  return report;
}

// Report: the text summary on `out`, the --json / --csv / --html files, and
// the --verify verdict. kExitOk, or kExitFailure once the error is reported
// on `err`.
int WriteReport(const RunReport& report, const LoadSpec& spec, std::ostream& out,
                std::ostream& err) {
  out << RenderText(report);
  int code = kExitOk;
  const struct {
    const std::string& path;
    std::string (*render)(const RunReport&);
  } files[] = {{spec.json_path, RenderJson},
               {spec.csv_path, RenderCsv},
               {spec.html_path, RenderHtml}};
  for (const auto& f : files) {
    if (f.path.empty()) continue;
    absl::Status written = WriteFile(f.path, f.render(report));
    if (!written.ok()) {
      ReportError(written, err);
      code = kExitFailure;
    } else {
      out << "wrote " << f.path << "\n";
    }
  }
  if (report.verify.matched != report.verify.checked ||
      (spec.verify > 0 && report.verify.checked == 0)) {
    ReportError(absl::FailedPreconditionError(absl::StrCat(
                    "--verify: ", report.verify.matched, " of ", report.verify.checked,
                    " checked replies match the local engine")),
                err);
    code = kExitFailure;
  }
  if (code == kExitOk && report.error_rate_exceeded) {
    ReportError(absl::UnavailableError(absl::StrFormat(
                    "%d of %d measured calls failed: over --max_error_rate=%g", report.failed_calls,
                    report.calls, spec.max_error_rate)),
                err);
    code = kExitErrorRate;
  }
  return code;
}

}  // namespace

int RunRopeload(const std::vector<std::string>& raw_args, std::ostream& out, std::ostream& err) {
  const std::vector<std::string> args = ExpandShortFlags(raw_args);
  if (std::find(args.begin(), args.end(), "--version") != args.end()) {
    out << "ropeload " << ROPE_VERSION << "\n";
    return kExitOk;
  }
  client::FlagSet flags;
  AddLoadFlags(&flags);
  absl::Status status = flags.Parse(args);
  if (flags.help_requested()) {
    out << kUsage << flags.Help();
    return kExitOk;
  }
  if (!status.ok()) {
    ReportError(status, err);
    err << "(see ropeload --help)\n";
    return kExitUsage;
  }
  RunSetup setup;
  const int setup_code = SetUpRun(flags, err, &setup);
  if (setup_code != kExitOk) return setup_code;
  const RunReport report = Sweep(setup);
  ChannelPool::KeepUntilExit(std::move(setup.pool));  // why: ChannelPool::KeepUntilExit
  return WriteReport(report, setup.spec, out, err);
}

}  // namespace load
}  // namespace rope
