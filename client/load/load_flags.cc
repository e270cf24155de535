#include "client/load/load_flags.h"

#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/flags/common_flags.h"
#include "client/load/workload.h"

namespace rope {
namespace load {
namespace {

using client::FlagSet;
using client::UsageError;

constexpr int kMaxConnections = 256;
constexpr int kMaxConcurrency = 100000;
constexpr int kMaxVerify = 100000;
constexpr double kMaxRps = 1e6;

absl::Status ValidateOptionalRange(absl::string_view text) {
  if (text.empty()) return absl::OkStatus();
  return ParseRange(text).status();
}

absl::Status DurationAtLeast(const FlagSet& flags, absl::string_view name, absl::Duration min,
                             bool inclusive) {
  const absl::Duration d = flags.Duration(name);
  if (inclusive ? d >= min : d > min) return absl::OkStatus();
  return UsageError(absl::StrCat("--", name, "=", absl::FormatDuration(d), ": must be ",
                                 inclusive ? ">= " : "> ", absl::FormatDuration(min)));
}

absl::Status IntIn(const FlagSet& flags, absl::string_view name, int64_t lo, int64_t hi) {
  const int64_t v = flags.Int(name);
  if (v >= lo && v <= hi) return absl::OkStatus();
  return UsageError(absl::StrCat("--", name, "=", v, ": must be in [", lo, ", ", hi, "]"));
}

}  // namespace

void AddLoadFlags(FlagSet* flags) {
  client::AddConnectionFlags(flags, client::CallRetries::kNone);
  flags->Add("connections", FlagSet::Kind::kInt, "1",
             "Channels, each with its own HTTP/2 connection; requests are spread over them "
             "(one connection can cap throughput).");
  flags->Add("shm", FlagSet::Kind::kBool, "false",
             "Rotate workloads: send q and k by shared-memory reference (a POSIX region "
             "registered on every channel; server on this host, e.g. "
             "--target=unix:///path), rotated in place. Not with --verify.");

  flags->BeginGroup("Load shape");
  flags->Add("concurrency", FlagSet::Kind::kInt, "1",
             "Closed loop: workers, each with one request in flight (short form -c).");
  flags->Add("rps", FlagSet::Kind::kDouble, "0",
             "Open loop: send this many requests per second whatever the replies do "
             "(latency then counts from the scheduled send time).");
  flags->Add("poisson", FlagSet::Kind::kBool, "false",
             "Open loop: Poisson arrivals (exponential gaps, seeded by --seed) instead of "
             "constant gaps.");
  flags->Add("max_in_flight", FlagSet::Kind::kInt, "1000",
             "Open loop: arrivals finding this many requests outstanding are dropped (and "
             "counted).");
  flags->Add("duration", FlagSet::Kind::kDuration, "10s",
             "Measured time per step (short form -z).");
  flags->Add("requests", FlagSet::Kind::kInt, "0",
             "Measured requests per step instead of --duration (short form -n).");
  flags->Add("warmup", FlagSet::Kind::kDuration, "0s",
             "Unmeasured time at the start of each step (connections, caches, tables).");
  flags->Add("concurrency_range", FlagSet::Kind::kString, "",
             "Sweep of closed-loop steps: a:b:step or a:b:xN (e.g. 1:64:x2).",
             ValidateOptionalRange);
  flags->Add("rps_range", FlagSet::Kind::kString, "",
             "Sweep of open-loop steps: a:b:step or a:b:xN requests per second.",
             ValidateOptionalRange);
  flags->Add("max_p99", FlagSet::Kind::kDuration, "0s",
             "Latency SLO: a sweep stops after the first step whose p99 exceeds it; 0: none.");

  flags->BeginGroup("Measurement");
  flags->Add("window", FlagSet::Kind::kDuration, "1s",
             "Measurement window: throughput and latency are also reported per window.");
  flags->Add("stability_percent", FlagSet::Kind::kDouble, "10",
             "A step is stable when its last 3 complete windows have throughput and mean "
             "latency within +-this percent of their average.");
  flags->Add("verify", FlagSet::Kind::kInt, "0",
             "Check this many replies per step, spread over it, against the local CPU "
             "engine; a mismatch makes ropeload exit 1.");

  flags->BeginGroup("Output");
  flags->Add("json", FlagSet::Kind::kString, "", "Write the full report as JSON to this file.");
  flags->Add("csv", FlagSet::Kind::kString, "", "Write one CSV row per step to this file.");
  flags->Add("html", FlagSet::Kind::kString, "",
             "Write a self-contained HTML report with SVG charts to this file.");
  flags->Add("progress", FlagSet::Kind::kBool, "true",
             "Show a progress bar on stderr when it is a terminal (--noprogress: never).");

  flags->BeginGroup("Pass/fail and retries");
  flags->Add("max_error_rate", FlagSet::Kind::kDouble, "0",
             "Exit 3 when failed calls / measured calls (all steps) exceed this fraction "
             "(0.01: 1%); the default 0 fails the run on any error, so a smoke test against a "
             "broken service fails.");
  flags->Add("max_attempts", FlagSet::Kind::kInt, "1",
             "Attempts per call, as RopeClient's retry policy makes them (UNAVAILABLE is retried "
             "on another address, up to 5); 1: never retried. Retries are counted in the "
             "report.");

  AddWorkloadFlags(flags);
}

absl::StatusOr<LoadSpec> LoadSpecFromFlags(const FlagSet& flags) {
  LoadSpec spec;
  spec.target = flags.String("target");
  if (spec.target.empty()) return UsageError("--target is empty");
  for (absl::Status s : {DurationAtLeast(flags, "deadline", absl::ZeroDuration(), false),
                         IntIn(flags, "connections", 1, kMaxConnections),
                         IntIn(flags, "concurrency", 1, kMaxConcurrency),
                         IntIn(flags, "max_in_flight", 1, kMaxConcurrency),
                         IntIn(flags, "requests", 0, int64_t{1} << 40),
                         IntIn(flags, "verify", 0, kMaxVerify),
                         IntIn(flags, "max_attempts", 1, 5),
                         DurationAtLeast(flags, "duration", absl::ZeroDuration(), false),
                         DurationAtLeast(flags, "warmup", absl::ZeroDuration(), true),
                         DurationAtLeast(flags, "window", absl::Milliseconds(10), true),
                         DurationAtLeast(flags, "max_p99", absl::ZeroDuration(), true)}) {
    if (!s.ok()) return s;
  }
  spec.deadline = flags.Duration("deadline");
  spec.security = client::ChannelSecurityFromFlags(flags);
  spec.connections = static_cast<int>(flags.Int("connections"));
  spec.max_in_flight = static_cast<int>(flags.Int("max_in_flight"));
  spec.duration = flags.Duration("duration");
  spec.requests = flags.Int("requests");
  spec.warmup = flags.Duration("warmup");
  spec.window = flags.Duration("window");
  spec.max_p99 = flags.Duration("max_p99");
  spec.verify = static_cast<int>(flags.Int("verify"));
  spec.seed = static_cast<uint64_t>(flags.Int("seed"));
  spec.poisson = flags.Bool("poisson");
  spec.progress = flags.Bool("progress");
  spec.json_path = flags.String("json");
  spec.csv_path = flags.String("csv");
  spec.html_path = flags.String("html");
  spec.stability_percent = flags.Double("stability_percent");
  spec.max_error_rate = flags.Double("max_error_rate");
  if (!(spec.max_error_rate >= 0 && spec.max_error_rate <= 1)) {
    return UsageError(absl::StrCat("--max_error_rate=", spec.max_error_rate,
                                   ": must be in [0, 1] (a fraction of the measured calls)"));
  }
  spec.max_attempts = static_cast<int>(flags.Int("max_attempts"));
  if (!(spec.stability_percent > 0) || !std::isfinite(spec.stability_percent)) {
    return UsageError(absl::StrCat("--stability_percent=", spec.stability_percent,
                                   ": must be > 0"));
  }
  if (flags.IsSet("requests") && flags.IsSet("duration")) {
    return UsageError("give --duration or --requests, not both");
  }
  if (flags.IsSet("requests") && spec.requests == 0) {
    return UsageError("--requests=0: must be >= 1");
  }

  const double rps = flags.Double("rps");
  if (!(rps >= 0 && rps <= kMaxRps)) {
    return UsageError(absl::StrCat("--rps=", rps, ": must be in [0, ", kMaxRps, "]"));
  }
  const std::string& c_range = flags.String("concurrency_range");
  const std::string& r_range = flags.String("rps_range");
  const int load_flags = (flags.IsSet("concurrency") ? 1 : 0) + (rps > 0 ? 1 : 0) +
                         (c_range.empty() ? 0 : 1) + (r_range.empty() ? 0 : 1);
  if (load_flags > 1) {
    return UsageError(
        "give one of --concurrency (closed loop), --rps (open loop), --concurrency_range or "
        "--rps_range");
  }
  if (spec.poisson && rps == 0 && r_range.empty()) {
    return UsageError("--poisson needs an open loop: --rps or --rps_range");
  }
  if (!c_range.empty()) {
    absl::StatusOr<std::vector<double>> values = ParseRange(c_range);
    if (!values.ok()) return UsageError(values.status().message());
    for (double v : *values) {
      if (v != std::floor(v) || v > kMaxConcurrency) {
        return UsageError(absl::StrCat("--concurrency_range=", c_range, ": concurrency ", v,
                                       " is not an integer in [1, ", kMaxConcurrency, "]"));
      }
      spec.steps.push_back({static_cast<int>(v), 0});
    }
    spec.sweep = true;
  } else if (!r_range.empty()) {
    absl::StatusOr<std::vector<double>> values = ParseRange(r_range);
    if (!values.ok()) return UsageError(values.status().message());
    for (double v : *values) {
      if (v > kMaxRps) {
        return UsageError(absl::StrCat("--rps_range=", r_range, ": rate ", v, " is over ",
                                       kMaxRps));
      }
      spec.steps.push_back({1, v});
    }
    spec.sweep = true;
  } else if (rps > 0) {
    spec.steps.push_back({1, rps});
  } else {
    spec.steps.push_back({static_cast<int>(flags.Int("concurrency")), 0});
  }
  return spec;
}

std::vector<std::string> ExpandShortFlags(const std::vector<std::string>& args) {
  static const struct {
    const char* short_form;
    const char* long_form;
  } kShort[] = {{"-c", "--concurrency"}, {"-n", "--requests"}, {"-z", "--duration"}};
  std::vector<std::string> out;
  for (const std::string& arg : args) {
    std::string expanded = arg;
    for (const auto& s : kShort) {
      if (arg == s.short_form) {
        expanded = s.long_form;
      } else if (absl::StartsWith(arg, absl::StrCat(s.short_form, "="))) {
        expanded = absl::StrCat(s.long_form, arg.substr(2));
      }
    }
    out.push_back(std::move(expanded));
  }
  return out;
}

}  // namespace load
}  // namespace rope
