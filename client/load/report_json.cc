// RenderJson: the machine-readable report (schema in report.h).
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/load/json_writer.h"
#include "client/load/report.h"

namespace rope {
namespace load {
namespace {

void WriteSummary(absl::string_view key, const LatencySummary& s, JsonWriter* json) {
  json->Key(key).BeginObject();
  json->Field("count", s.count);
  json->Field("min", s.min_ms);
  json->Field("p50", s.p50_ms);
  json->Field("p90", s.p90_ms);
  json->Field("p95", s.p95_ms);
  json->Field("p99", s.p99_ms);
  json->Field("p999", s.p999_ms);
  json->Field("max", s.max_ms);
  json->Field("mean", s.mean_ms);
  json->Field("stddev", s.stddev_ms);
  json->EndObject();
}

void WriteErrors(absl::string_view key, const std::vector<ErrorTally>& errors, JsonWriter* json) {
  json->Key(key).BeginArray();
  for (const ErrorTally& e : errors) {
    json->BeginObject();
    json->Field("code", absl::StatusCodeToString(e.code));
    json->Field("code_number", static_cast<int>(e.code));
    json->Field("count", e.count);
    json->Field("first_message", e.first_message);
    json->EndObject();
  }
  json->EndArray();
}

void WriteVerify(const VerifySummary& v, JsonWriter* json) {
  json->Key("verify").BeginObject();
  json->Field("requested", v.requested);
  json->Field("checked", v.checked);
  json->Field("matched", v.matched);
  json->Field("max_abs_error", v.max_abs_error);
  json->Key("failures").BeginArray();
  for (const std::string& f : v.failures) json->String(f);
  json->EndArray();
  json->EndObject();
}

void WriteStep(const StepResult& step, JsonWriter* json) {
  json->BeginObject();
  json->Field("mode", step.plan.open_loop() ? "open" : "closed");
  if (step.plan.open_loop()) {
    json->Key("concurrency").Null();
    json->Field("target_rps", step.plan.rps);
  } else {
    json->Field("concurrency", step.plan.concurrency);
    json->Key("target_rps").Null();
  }
  json->Field("measured_s", step.measured_s);
  json->Field("issue_s", step.issue_s);
  json->Field("issued", step.issued);
  json->Field("ok", step.ok);
  json->Field("errors", step.errors);
  json->Field("dropped", step.dropped);
  json->Field("peak_in_flight", step.peak_in_flight);
  json->Field("retries", step.retries);
  json->Field("retried_calls", step.retried_calls);
  json->Field("stalled", step.stalled);
  json->Key("warmup").BeginObject();
  json->Field("ok", step.warmup_ok);
  json->Field("errors", step.warmup_errors);
  WriteErrors("errors_by_code", step.warmup_errors_by_code, json);
  json->EndObject();
  json->Field("rps", step.rps);
  if (step.plan.open_loop()) {
    json->Field("scheduled", step.scheduled);
    json->Field("offered_rps", step.offered_rps);
    json->Field("rate_reached", step.rate_reached);
    json->Field("schedule_lag_max_ms", step.schedule_lag_max_ms);
  } else {
    json->Key("scheduled").Null();
    json->Key("offered_rps").Null();
    json->Key("rate_reached").Null();
    json->Key("schedule_lag_max_ms").Null();
  }
  json->Field("sent_mb_per_s", step.sent_mb_per_s);
  json->Field("received_mb_per_s", step.received_mb_per_s);
  WriteSummary("latency_ms", step.latency_summary, json);
  WriteSummary("marshal_ms", step.marshal_summary, json);
  WriteSummary("wait_ms", step.wait_summary, json);
  WriteErrors("errors_by_code", step.errors_by_code, json);
  json->Key("windows").BeginArray();
  for (const WindowStats& w : step.windows) {
    json->BeginObject();
    json->Field("start_s", w.start_s);
    json->Field("end_s", w.end_s);
    json->Field("ok", w.ok);
    json->Field("errors", w.errors);
    json->Field("rps", w.rps);
    json->Field("complete", w.complete);
    WriteSummary("latency_ms", w.latency, json);
    json->EndObject();
  }
  json->EndArray();
  json->Field("stable", step.stable);
  json->Field("stability", step.stability);
  json->Key("histogram").BeginArray();
  step.latency.ForEachBucket([json](int64_t lower, int64_t upper, int64_t count) {
    json->BeginObject();
    json->Field("lower_ms", static_cast<double>(lower) / 1e6);
    json->Field("upper_ms", static_cast<double>(upper) / 1e6);
    json->Field("count", count);
    json->EndObject();
  });
  json->EndArray();
  WriteVerify(step.verify, json);
  json->EndObject();
}

}  // namespace

std::string RenderJson(const RunReport& report) {
  const LoadSpec& spec = report.spec;
  JsonWriter json;
  json.BeginObject();
  json.Field("schema", "ropeload/1");
  json.Field("target", report.target);
  json.Field("server", report.server);
  json.Key("workload").BeginObject();
  json.Field("rpc", report.workload);
  json.Field("config", report.config);
  json.Field("payload", report.payload);
  json.Field("request_bytes", report.request_bytes);
  json.EndObject();
  json.Key("load").BeginObject();
  const bool open = !spec.steps.empty() && spec.steps[0].open_loop();
  json.Field("mode", open ? "open" : "closed");
  if (open) {
    json.Field("arrivals", spec.poisson ? "poisson" : "constant");
  } else {
    json.Key("arrivals").Null();
  }
  json.Field("connections", spec.connections);
  if (spec.requests > 0) {
    json.Key("duration_s").Null();
    json.Field("requests", spec.requests);
  } else {
    json.Field("duration_s", absl::ToDoubleSeconds(spec.duration));
    json.Key("requests").Null();
  }
  json.Field("warmup_s", absl::ToDoubleSeconds(spec.warmup));
  json.Field("window_s", absl::ToDoubleSeconds(spec.window));
  json.Field("stability_percent", spec.stability_percent);
  json.Field("deadline_s", absl::ToDoubleSeconds(spec.deadline));
  json.Field("max_in_flight", spec.max_in_flight);
  json.Field("sweep", spec.sweep);
  json.EndObject();
  json.Key("steps").BeginArray();
  for (const StepResult& step : report.steps) WriteStep(step, &json);
  json.EndArray();
  json.Key("slo").BeginObject();
  if (spec.max_p99 > absl::ZeroDuration()) {
    json.Field("max_p99_ms", absl::ToDoubleMilliseconds(spec.max_p99));
  } else {
    json.Key("max_p99_ms").Null();
  }
  json.Field("stopped", report.slo_stopped);
  json.Field("note", report.slo_note);
  json.EndObject();
  WriteVerify(report.verify, &json);
  json.Key("errors").BeginObject();
  json.Field("calls", report.calls);
  json.Field("failed", report.failed_calls);
  json.Field("max_error_rate", spec.max_error_rate);
  json.Field("exceeded", report.error_rate_exceeded);
  json.EndObject();
  json.EndObject();
  return json.str() + "\n";
}

}  // namespace load
}  // namespace rope
