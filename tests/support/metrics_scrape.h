// Reading a ropeserve's Prometheus endpoint from a test: a bounded HTTP GET
// on 127.0.0.1, and the value of one sample in the text exposition format.
#ifndef ROPE_TESTS_SUPPORT_METRICS_SCRAPE_H_
#define ROPE_TESTS_SUPPORT_METRICS_SCRAPE_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace rope {
namespace test {

// The whole response (status line, headers, body) to GET
// http://127.0.0.1:<port><path> (HTTP/1.0, so the server closes the
// connection after the body). UNAVAILABLE when nothing listens,
// DEADLINE_EXCEEDED past `timeout`.
absl::StatusOr<std::string> HttpGetResponse(int port, absl::string_view path,
                                            absl::Duration timeout);

// The body of HttpGetResponse; INTERNAL for a status other than 200.
absl::StatusOr<std::string> HttpGet(int port, absl::string_view path, absl::Duration timeout);

// The value of the sample `name{labels...}` in Prometheus text `exposition`:
// the one line of that metric whose labels include every pair of `labels`
// (other labels may be present). 0 when no such line exists (a counter that
// was never incremented is not exposed); INVALID_ARGUMENT when several lines
// match or the value is not a number.
absl::StatusOr<double> SampleValue(absl::string_view exposition, absl::string_view name,
                                   const std::map<std::string, std::string>& labels);

}  // namespace test
}  // namespace rope

#endif  // ROPE_TESTS_SUPPORT_METRICS_SCRAPE_H_
