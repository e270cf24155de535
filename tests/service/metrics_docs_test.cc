// docs/operations.md's metrics table against the registry ropeserve exports:
// every family is listed, and every label value a family can take (each
// rpc, reason, part, result) is named in the docs.
#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "server/service/service_metrics.h"
#include "server/service/token_auth.h"

#ifndef ROPE_SOURCE_DIR
#error "ROPE_SOURCE_DIR must name the source tree"
#endif

namespace rope {
namespace {

std::string ReadOperationsDoc() {
  std::ifstream in(std::string(ROPE_SOURCE_DIR) + "/docs/operations.md");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The backticked words of the list after `prefix`, up to its "." or " (".
std::set<std::string> BacktickedAfter(const std::string& doc, const std::string& prefix) {
  const size_t at = doc.find(prefix);
  if (at == std::string::npos) return {};
  const size_t end = std::min(doc.find('.', at), doc.find(" (", at));
  const std::string paragraph = doc.substr(at + prefix.size(), end - at - prefix.size());
  std::set<std::string> words;
  std::vector<std::string> parts = absl::StrSplit(paragraph, '`');
  for (size_t i = 1; i < parts.size(); i += 2) words.insert(parts[i]);
  return words;
}

// The table row of metric `name` ("| `name` | ...").
std::string TableRow(const std::string& doc, const std::string& name) {
  const size_t at = doc.find(absl::StrCat("| `", name, "` |"));
  if (at == std::string::npos) return "";
  return doc.substr(at, doc.find('\n', at) - at);
}

TEST(MetricsDocsTest, EveryFamilyAndLabelValueIsDocumented) {
  const std::string doc = ReadOperationsDoc();
  ASSERT_FALSE(doc.empty());
  ServiceMetrics metrics;
  for (int i = 0; i < kRpcCount; ++i) {
    metrics.RecordRequest(static_cast<Rpc>(i), grpc::StatusCode::OK, absl::Milliseconds(1), 1, 1);
  }
  for (AuthFailure reason : {AuthFailure::kMissingToken, AuthFailure::kInvalidToken}) {
    metrics.RecordAuthFailure(reason);
  }
  for (bool tls : {false, true}) {
    for (bool accepted : {false, true}) metrics.RecordCredentialReload(tls, accepted);
  }
  const std::set<std::string> rpc_values = BacktickedAfter(doc, "`rpc` is one of ");
  std::set<std::string> rpcs_seen;
  for (const prometheus::MetricFamily& family : metrics.registry()->Collect()) {
    const std::string row = TableRow(doc, family.name);
    EXPECT_FALSE(row.empty()) << family.name << " is not in docs/operations.md's metrics table";
    for (const prometheus::ClientMetric& metric : family.metric) {
      for (const prometheus::ClientMetric::Label& label : metric.label) {
        if (label.name == "code" || label.name == "le") continue;  // gRPC's codes; buckets
        if (label.name == "rpc") {
          rpcs_seen.insert(label.value);
          EXPECT_EQ(rpc_values.count(label.value), 1u)
              << "rpc value " << label.value << " is not in the docs' list";
        } else {
          EXPECT_TRUE(absl::StrContains(row, absl::StrCat("`", label.value, "`")))
              << family.name << "'s " << label.name << " value " << label.value
              << " is not in its row: " << row;
        }
      }
    }
  }
  EXPECT_EQ(rpcs_seen.size(), static_cast<size_t>(kRpcCount));
  EXPECT_EQ(rpc_values, rpcs_seen) << "the docs list rpc values the registry does not have";
}

}  // namespace
}  // namespace rope
