// RenderCsv: one row per step, for spreadsheets and plotting scripts.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/load/report.h"

namespace rope {
namespace load {

std::string RenderCsv(const RunReport& report) {
  std::string out =
      "step,mode,concurrency,target_rps,measured_s,scheduled,issued,ok,errors,dropped,rps,offered_rps,"
      "rate_reached,sent_mb_per_s,received_mb_per_s,min_ms,p50_ms,p90_ms,p95_ms,p99_ms,"
      "p999_ms,max_ms,mean_ms,stddev_ms,marshal_mean_ms,wait_mean_ms,stable\n";
  for (size_t i = 0; i < report.steps.size(); ++i) {
    const StepResult& s = report.steps[i];
    const LatencySummary& l = s.latency_summary;
    const bool open = s.plan.open_loop();
    std::vector<std::string> cells = {
        absl::StrCat(i),
        open ? "open" : "closed",
        open ? "" : absl::StrCat(s.plan.concurrency),
        open ? absl::StrFormat("%g", s.plan.rps) : "",
        absl::StrFormat("%.6f", s.measured_s),
        open ? absl::StrCat(s.scheduled) : "",
        absl::StrCat(s.issued),
        absl::StrCat(s.ok),
        absl::StrCat(s.errors),
        absl::StrCat(s.dropped),
        absl::StrFormat("%.3f", s.rps),
        open ? absl::StrFormat("%.3f", s.offered_rps) : "",
        open ? (s.rate_reached ? "true" : "false") : "",
        absl::StrFormat("%.6f", s.sent_mb_per_s),
        absl::StrFormat("%.6f", s.received_mb_per_s),
        absl::StrFormat("%.6f", l.min_ms),
        absl::StrFormat("%.6f", l.p50_ms),
        absl::StrFormat("%.6f", l.p90_ms),
        absl::StrFormat("%.6f", l.p95_ms),
        absl::StrFormat("%.6f", l.p99_ms),
        absl::StrFormat("%.6f", l.p999_ms),
        absl::StrFormat("%.6f", l.max_ms),
        absl::StrFormat("%.6f", l.mean_ms),
        absl::StrFormat("%.6f", l.stddev_ms),
        absl::StrFormat("%.6f", s.marshal_summary.mean_ms),
        absl::StrFormat("%.6f", s.wait_summary.mean_ms),
        s.stable ? "true" : "false",
    };
    absl::StrAppend(&out, absl::StrJoin(cells, ","), "\n");
  }
  return out;
}

}  // namespace load
}  // namespace rope
