// docs/models.md's list of the config.json keys the server reads and
// refuses, against the parsers (core/engine/hf_config.cc and
// core/engine/qwen_rope_index.cc): every key a parser looks up is listed as
// read, every key of the parser's refused table as refused, and the list
// names no other key. Each refused key's example is then sent to the parser,
// which must refuse it naming the key.
//
// The parsers' lookups are found in their source: a key is read through the
// JSON scope's typed getters (Find, Has, Number, Count, Bool, String, ...),
// AliasedNumber's spellings, `required`, `find`, and IntegerAt. A new way of
// reading a key needs its pattern here, or the list test misses it.
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/engine/hf_config.h"
#include "gtest/gtest.h"

#ifndef ROPE_SOURCE_DIR
#error "ROPE_SOURCE_DIR must name the source tree"
#endif

namespace rope {
namespace {

std::string ReadSource(const std::string& relative) {
  std::ifstream in(std::string(ROPE_SOURCE_DIR) + "/" + relative);
  EXPECT_TRUE(in.good()) << relative;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Every capture group 1 of `pattern` in `text`.
std::set<std::string> Captures(const std::string& text, const std::string& pattern) {
  std::set<std::string> out;
  const std::regex re(pattern);
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator();
       ++it) {
    out.insert((*it)[1].str());
  }
  return out;
}

std::set<std::string> QuotedNames(const std::string& text) {
  return Captures(text, "\"([a-z_0-9]+)\"");
}

std::string Between(const std::string& text, const std::string& begin, const std::string& end) {
  const size_t a = text.find(begin);
  if (a == std::string::npos) return "";
  const size_t b = text.find(end, a + begin.size());
  return b == std::string::npos ? "" : text.substr(a + begin.size(), b - a - begin.size());
}

struct ParserKeys {
  std::set<std::string> read;
  std::set<std::string> refused;
};

ParserKeys KeysOfTheParsers() {
  ParserKeys keys;
  const std::string hf = ReadSource("core/engine/hf_config.cc");
  keys.read = Captures(hf,
                       "\\b(?:Find|Has|Number|PositiveNumber|Count|Bool|String|Object|CountList|"
                       "PositiveList|StringList|required)\\((?:[a-z_.]+, )?\"([a-z_0-9]+)\"\\)");
  for (const std::string& list :
       Captures(hf, "AliasedNumber\\([a-z_.]+, \\{([^}]*)\\}\\)")) {
    for (const std::string& key : QuotedNames(list)) keys.read.insert(key);
  }
  keys.refused =
      Captures(Between(hf, "kRefusedKeys[] = {", "};"), "\\{\"([a-z_0-9]+)\",");
  const std::string qwen = ReadSource("core/engine/qwen_rope_index.cc");
  for (const char* pattern :
       {"find\\(\"([a-z_0-9]+)\"\\)", "IntegerAt\\([^)]*\"([a-z_0-9]+)\"\\)",
        "std::pair<const char\\*, int64_t\\*>\\{\"([a-z_0-9]+)\""}) {
    for (const std::string& key : Captures(qwen, pattern)) keys.read.insert(key);
  }
  return keys;
}

struct DocRow {
  std::vector<std::string> keys;
  std::string status;   // "read" or "refused"
  std::string example;  // refused rows: the JSON after "e.g."
};

std::vector<DocRow> RowsOfTheDocs() {
  const std::string list = Between(ReadSource("docs/models.md"), "<!-- hf-config-keys: begin -->",
                                   "<!-- hf-config-keys: end -->");
  EXPECT_FALSE(list.empty()) << "docs/models.md has no hf-config-keys list";
  std::vector<DocRow> rows;
  std::istringstream lines(list);
  const std::regex row_re("^\\| ([^|]+) \\| (read|refused) \\| (.*) \\|$");
  const std::regex example_re("e\\.g\\. `(\\{.*\\})`");
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| Key", 0) == 0 || line.rfind("|---", 0) == 0 || line.empty()) continue;
    std::smatch m;
    EXPECT_TRUE(std::regex_match(line, m, row_re)) << "a row not like | `key` | read | use |: "
                                                   << line;
    if (m.empty()) continue;
    DocRow row;
    for (const std::string& key : Captures(m[1].str(), "`([a-z_0-9]+)`")) row.keys.push_back(key);
    EXPECT_FALSE(row.keys.empty()) << line;
    row.status = m[2].str();
    const std::string use = m[3].str();
    std::smatch example;
    if (std::regex_search(use, example, example_re)) row.example = example[1].str();
    rows.push_back(row);
  }
  return rows;
}

std::string Join(const std::set<std::string>& keys) { return absl::StrJoin(keys, ", "); }

TEST(HfConfigKeysDocTest, TheListNamesEveryKeyTheParsersReadOrRefuseAndNoOther) {
  const ParserKeys parser = KeysOfTheParsers();
  // The patterns found something: a parser rewritten past them fails here
  // rather than emptying both sides.
  ASSERT_GT(parser.read.size(), 50u);
  ASSERT_GE(parser.refused.size(), 5u);
  std::set<std::string> doc_read, doc_refused;
  for (const DocRow& row : RowsOfTheDocs()) {
    for (const std::string& key : row.keys) {
      EXPECT_TRUE((row.status == "read" ? doc_read : doc_refused).insert(key).second)
          << key << " is listed twice";
    }
  }
  std::set<std::string> unlisted, not_read, unlisted_refusals, not_refused;
  for (const std::string& key : parser.read) {
    if (!doc_read.count(key)) unlisted.insert(key);
  }
  for (const std::string& key : doc_read) {
    if (!parser.read.count(key)) not_read.insert(key);
  }
  for (const std::string& key : parser.refused) {
    if (!doc_refused.count(key)) unlisted_refusals.insert(key);
  }
  for (const std::string& key : doc_refused) {
    if (!parser.refused.count(key)) not_refused.insert(key);
  }
  EXPECT_TRUE(unlisted.empty()) << "read by the parser, missing from docs/models.md's list: "
                                << Join(unlisted);
  EXPECT_TRUE(not_read.empty()) << "listed as read in docs/models.md, never read by the parser: "
                                << Join(not_read);
  EXPECT_TRUE(unlisted_refusals.empty())
      << "refused by the parser, missing from docs/models.md's list: " << Join(unlisted_refusals);
  EXPECT_TRUE(not_refused.empty())
      << "listed as refused in docs/models.md, not in the parser's refused table: "
      << Join(not_refused);
}

TEST(HfConfigKeysDocTest, EachRefusedKeysExampleIsRefusedNamingTheKey) {
  int checked = 0;
  for (const DocRow& row : RowsOfTheDocs()) {
    if (row.status != "refused") continue;
    ASSERT_EQ(row.keys.size(), 1u) << "one refused key per row, with its example";
    ASSERT_FALSE(row.example.empty())
        << row.keys[0] << ": a refused key's row gives an example, e.g. `{\"key\": value}`";
    nlohmann::json config = nlohmann::json::parse(
        R"({"model_type": "llama", "rope_theta": 10000, "head_dim": 64,
            "max_position_embeddings": 64})");
    const nlohmann::json example = nlohmann::json::parse(row.example, nullptr, false);
    ASSERT_TRUE(example.is_object()) << row.keys[0] << ": the example is not a JSON object";
    config.merge_patch(example);
    // The base alone is accepted: the refusal is the example's.
    ASSERT_TRUE(ParseHfRopeConfig(R"({"model_type": "llama", "rope_theta": 10000,
                                      "head_dim": 64, "max_position_embeddings": 64})",
                                  HfLayerSelector{})
                    .ok());
    absl::StatusOr<HfRopeConfig> parsed = ParseHfRopeConfig(config.dump(), HfLayerSelector{});
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << row.example;
    EXPECT_NE(std::string(parsed.status().message()).find(absl::StrCat("hf_config_json: ",
                                                                        row.keys[0], " is ")),
              std::string::npos)
        << row.example << ": " << parsed.status();
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

}  // namespace
}  // namespace rope
