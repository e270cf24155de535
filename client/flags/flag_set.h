// A small command-line flag parser for one ropectl subcommand (or ropeload).
//
// absl flags are process-global, so every subcommand would accept (and
// --help would list) every other subcommand's flags. A FlagSet holds only
// the flags its command declares, in named groups, and renders its own help.
//
// Accepted forms: --name=value, --name value, and for booleans --name,
// --name=true|false|1|0 and --noname. "-h" and "--help" request help.
// Values are checked when parsed (type, and an optional validator), so a
// command that got an OK from Parse reads its flags without further checks.
// Errors from Parse are usage errors (IsUsageError).
#ifndef ROPE_CLIENT_FLAGS_FLAG_SET_H_
#define ROPE_CLIENT_FLAGS_FLAG_SET_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace rope {
namespace client {

// An INVALID_ARGUMENT marked as a mistake on the command line (ropectl exits
// with 2 for these, 1 for failures after the command line was accepted).
absl::Status UsageError(absl::string_view message);
bool IsUsageError(const absl::Status& status);

class FlagSet {
 public:
  enum class Kind { kString, kInt, kDouble, kBool, kDuration };
  // Checks a value beyond its kind (e.g. one of a set of names). Returns
  // INVALID_ARGUMENT with a message naming what is wrong with `value`.
  using Validator = std::function<absl::Status(absl::string_view value)>;

  // Starts a group: flags added after it are listed under `title` in Help().
  void BeginGroup(std::string title);

  // Declares --name. `default_value` is used when the flag is not given and
  // must itself be valid. Precondition: `name` not declared yet.
  void Add(std::string name, Kind kind, std::string default_value, std::string help,
           Validator validator = nullptr);

  // Parses `args` (the words after the subcommand). A usage error for an
  // unknown flag, a missing or malformed value, or a positional argument.
  absl::Status Parse(absl::Span<const std::string> args);

  bool help_requested() const { return help_requested_; }

  // Whether --name appeared on the command line.
  bool IsSet(absl::string_view name) const;

  // Typed values (the default when not set). Preconditions: `name` was
  // declared with a matching kind and Parse succeeded.
  const std::string& String(absl::string_view name) const;
  int64_t Int(absl::string_view name) const;
  double Double(absl::string_view name) const;
  bool Bool(absl::string_view name) const;
  absl::Duration Duration(absl::string_view name) const;

  // The flags, grouped, with kinds, defaults and help, wrapped for a
  // terminal.
  std::string Help() const;

 private:
  struct Flag {
    std::string name;
    Kind kind;
    std::string default_value;
    std::string help;
    Validator validator;
    std::string group;
    std::string value;
    bool set = false;
  };

  const Flag& Get(absl::string_view name, Kind kind) const;
  absl::Status SetValue(Flag* flag, absl::string_view value);

  std::vector<Flag> flags_;
  std::map<std::string, size_t, std::less<>> index_;
  std::vector<std::string> groups_;
  bool help_requested_ = false;
};

}  // namespace client
}  // namespace rope

#endif  // ROPE_CLIENT_FLAGS_FLAG_SET_H_
