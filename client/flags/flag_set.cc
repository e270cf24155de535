#include "client/flags/flag_set.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace rope {
namespace client {
namespace {

constexpr char kUsagePayloadUrl[] = "type.ropeserve/ropectl.UsageError";
constexpr size_t kHelpWidth = 78;
constexpr char kHelpIndent[] = "      ";

bool ParseBoolValue(absl::string_view value, bool* out) {
  if (value == "true" || value == "1" || value == "yes") {
    *out = true;
    return true;
  }
  if (value == "false" || value == "0" || value == "no") {
    *out = false;
    return true;
  }
  return false;
}

absl::string_view KindName(FlagSet::Kind kind) {
  switch (kind) {
    case FlagSet::Kind::kString: return "string";
    case FlagSet::Kind::kInt: return "int";
    case FlagSet::Kind::kDouble: return "number";
    case FlagSet::Kind::kBool: return "bool";
    case FlagSet::Kind::kDuration: return "duration";
  }
  return "?";
}

// Greedy word wrap of `text` into lines prefixed by kHelpIndent.
void AppendWrapped(absl::string_view text, std::string* out) {
  for (absl::string_view paragraph : absl::StrSplit(text, '\n')) {
    std::string line = kHelpIndent;
    for (absl::string_view word : absl::StrSplit(paragraph, ' ', absl::SkipEmpty())) {
      if (line.size() > sizeof(kHelpIndent) - 1 && line.size() + 1 + word.size() > kHelpWidth) {
        absl::StrAppend(out, line, "\n");
        line = kHelpIndent;
      }
      if (line.size() > sizeof(kHelpIndent) - 1) line += ' ';
      absl::StrAppend(&line, word);
    }
    absl::StrAppend(out, line, "\n");
  }
}

}  // namespace

absl::Status UsageError(absl::string_view message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kUsagePayloadUrl, absl::Cord("1"));
  return status;
}

bool IsUsageError(const absl::Status& status) {
  return status.GetPayload(kUsagePayloadUrl).has_value();
}

void FlagSet::BeginGroup(std::string title) { groups_.push_back(std::move(title)); }

void FlagSet::Add(std::string name, Kind kind, std::string default_value, std::string help,
                  Validator validator) {
  if (index_.count(name) != 0) {
    std::fprintf(stderr, "ropectl bug: flag --%s declared twice\n", name.c_str());
    std::abort();
  }
  Flag flag;
  flag.name = name;
  flag.kind = kind;
  flag.default_value = default_value;
  flag.help = std::move(help);
  flag.validator = std::move(validator);
  flag.group = groups_.empty() ? "Flags" : groups_.back();
  flag.value = std::move(default_value);
  if (groups_.empty()) groups_.push_back(flag.group);
  index_[name] = flags_.size();
  flags_.push_back(std::move(flag));
}

absl::Status FlagSet::SetValue(Flag* flag, absl::string_view value) {
  const std::string where = absl::StrCat("--", flag->name, "=", value);
  switch (flag->kind) {
    case Kind::kString:
      break;
    case Kind::kInt: {
      int64_t v;
      if (!absl::SimpleAtoi(value, &v)) {
        return UsageError(absl::StrCat(where, ": not an integer"));
      }
      break;
    }
    case Kind::kDouble: {
      double v;
      if (!absl::SimpleAtod(value, &v)) return UsageError(absl::StrCat(where, ": not a number"));
      break;
    }
    case Kind::kBool: {
      bool v;
      if (!ParseBoolValue(value, &v)) {
        return UsageError(absl::StrCat(where, ": not true or false"));
      }
      break;
    }
    case Kind::kDuration: {
      absl::Duration v;
      if (!absl::ParseDuration(value, &v)) {
        return UsageError(
            absl::StrCat(where, ": not a duration (examples: 500ms, 10s, 2m, 1h30m)"));
      }
      break;
    }
  }
  if (flag->validator) {
    absl::Status status = flag->validator(value);
    if (!status.ok()) return UsageError(absl::StrCat(where, ": ", status.message()));
  }
  flag->value = std::string(value);
  flag->set = true;
  return absl::OkStatus();
}

absl::Status FlagSet::Parse(absl::Span<const std::string> args) {
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view arg = args[i];
    if (arg == "-h" || arg == "--help" || arg == "-help") {
      help_requested_ = true;
      continue;
    }
    if (!absl::StartsWith(arg, "-")) {
      return UsageError(absl::StrCat("unexpected argument '", arg, "' (flags start with --)"));
    }
    arg.remove_prefix(absl::StartsWith(arg, "--") ? 2 : 1);
    absl::string_view name = arg;
    absl::string_view value;
    bool has_value = false;
    const size_t eq = arg.find('=');
    if (eq != absl::string_view::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    // --rope-scaling and --rope_scaling name the same flag.
    const std::string normalized = absl::StrReplaceAll(name, {{"-", "_"}});
    name = normalized;
    auto it = index_.find(name);
    if (it == index_.end() && !has_value && absl::StartsWith(name, "no")) {
      // --nocausal
      auto negated = index_.find(name.substr(2));
      if (negated != index_.end() && flags_[negated->second].kind == Kind::kBool) {
        absl::Status status = SetValue(&flags_[negated->second], "false");
        if (!status.ok()) return status;
        continue;
      }
    }
    if (it == index_.end()) {
      return UsageError(absl::StrCat("unknown flag --", name, " (see --help)"));
    }
    Flag& flag = flags_[it->second];
    if (!has_value) {
      if (flag.kind == Kind::kBool) {
        value = "true";
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return UsageError(absl::StrCat("flag --", name, " needs a value"));
      }
    }
    ROPE_RETURN_IF_ERROR(SetValue(&flag, value));
  }
  return absl::OkStatus();
}

const FlagSet::Flag& FlagSet::Get(absl::string_view name, Kind kind) const {
  auto it = index_.find(name);
  if (it == index_.end() || flags_[it->second].kind != kind) {
    std::fprintf(stderr, "ropectl bug: flag --%s read as %s but not declared so\n",
                 std::string(name).c_str(), std::string(KindName(kind)).c_str());
    std::abort();
  }
  return flags_[it->second];
}

bool FlagSet::IsSet(absl::string_view name) const {
  auto it = index_.find(name);
  return it != index_.end() && flags_[it->second].set;
}

const std::string& FlagSet::String(absl::string_view name) const {
  return Get(name, Kind::kString).value;
}

int64_t FlagSet::Int(absl::string_view name) const {
  int64_t v = 0;
  (void)absl::SimpleAtoi(Get(name, Kind::kInt).value, &v);  // checked by SetValue
  return v;
}

double FlagSet::Double(absl::string_view name) const {
  double v = 0;
  (void)absl::SimpleAtod(Get(name, Kind::kDouble).value, &v);
  return v;
}

bool FlagSet::Bool(absl::string_view name) const {
  bool v = false;
  (void)ParseBoolValue(Get(name, Kind::kBool).value, &v);
  return v;
}

absl::Duration FlagSet::Duration(absl::string_view name) const {
  absl::Duration v;
  (void)absl::ParseDuration(Get(name, Kind::kDuration).value, &v);
  return v;
}

std::string FlagSet::Help() const {
  std::string out;
  for (const std::string& group : groups_) {
    bool any = false;
    for (const Flag& flag : flags_) {
      if (flag.group != group) continue;
      if (!any) absl::StrAppend(&out, "\n", group, ":\n");
      any = true;
      if (flag.kind == Kind::kBool) {
        absl::StrAppend(&out, "  --", flag.name, "  (default: ", flag.default_value, ")\n");
      } else {
        absl::StrAppend(&out, "  --", flag.name, "=<", KindName(flag.kind), ">  (default: ",
                        flag.default_value.empty() ? "none" : flag.default_value, ")\n");
      }
      AppendWrapped(flag.help, &out);
    }
  }
  return out;
}

}  // namespace client
}  // namespace rope
