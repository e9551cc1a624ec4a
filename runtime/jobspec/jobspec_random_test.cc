// 1,000 malformed job specs, mutations of a valid one under a fixed seed
// (wrong types, out-of-range numbers, huge strings, unknown and duplicate
// keys, broken YAML, deep nesting, random bytes), through the same parse,
// defaults and validation every command uses. Each must be answered (no
// crash, within 5 s) and, when refused, be an InvalidArgument that names a
// spec path (or gives the YAML error's line and column) in at most 4 KiB.
#include <chrono>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"
#include "runtime/jobspec/jobspec.h"

namespace loom::runtime::jobspec {
namespace {

namespace pb = google::protobuf;

constexpr char kValid[] = R"(name: random
model:
  family: gpt
  n_layer: 2
  n_head: 4
  d_model: 64
  seq_len: 32
  vocab: 256
train:
  steps: 10
  batch_size: 4
  lr: 0.001
  warmup_steps: 2
parallel:
  dp: 2
  tp: 2
  zero_stage: 1
data:
  format: auto
  val_fraction: 0.1
  order: sequential
checkpoint:
  every: 5
  keep: 2
)";

void CollectPaths(const pb::Descriptor* d, const std::string& prefix, std::set<std::string>& out) {
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    const std::string path = prefix.empty() ? f->name() : absl::StrCat(prefix, ".", f->name());
    out.insert(path);
    if (f->message_type() != nullptr) CollectPaths(f->message_type(), path, out);
  }
}

// The message names a spec path: "<path>: ...", "<path>[...]: ...", an unknown
// key with its position, a YAML error with its position, or the document.
bool NamesASpecPath(const std::string& msg, const std::set<std::string>& paths) {
  static const std::regex kYaml("^malformed YAML at line [0-9]+, column [0-9]+: .*");
  static const std::regex kUnknown("^unknown key '[^\\n]*' \\(line [0-9]+, column [0-9]+\\) \\(known keys here: .*");
  if (msg.size() > 4096) return false;
  if (std::regex_match(msg, kYaml) || std::regex_match(msg, kUnknown)) return true;
  if (msg.rfind("job spec", 0) == 0) return true;
  const size_t end = msg.find_first_of(":[");
  if (end == std::string::npos) return false;
  return paths.count(msg.substr(0, end)) > 0;
}

class Mutator {
 public:
  explicit Mutator(uint32_t seed) : rng_(seed) {}

  std::string Mutate(std::string yaml) {
    const int n = 1 + Pick(3);
    for (int i = 0; i < n; ++i) yaml = MutateOnce(yaml);
    return yaml;
  }

 private:
  int Pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  template <typename T>
  const T& OneOf(const std::vector<T>& v) { return v[Pick(static_cast<int>(v.size()))]; }

  // Replaces the value of a random "key: value" line.
  std::string SetValue(const std::string& yaml, const std::string& value) {
    std::vector<std::string> lines = absl::StrSplit(yaml, '\n');
    std::vector<int> scalar;
    for (int i = 0; i < static_cast<int>(lines.size()); ++i) {
      const size_t colon = lines[i].find(": ");
      if (colon != std::string::npos && colon + 2 < lines[i].size()) scalar.push_back(i);
    }
    if (scalar.empty()) return yaml + "\nname: " + value;
    std::string& line = lines[OneOf(scalar)];
    line = line.substr(0, line.find(": ") + 2) + value;
    return absl::StrJoin(lines, "\n");
  }

  std::string MutateOnce(const std::string& yaml) {
    static const std::vector<std::string> kWrongTypes = {"four", "[1, 2]", "{a: 1}", "true", "-", "null", "~",
                                                         "0x10", "'5'", "\"\"", "1e999", "!!binary aGk=", "*anchor",
                                                         "&a 1", "2024-01-01", "1_000"};
    static const std::vector<std::string> kNumbers = {"0", "-1", "-2147483648", "2147483647", "4294967296",
                                                      "99999999999999999999", "1e30", "-1e30", "nan", "-inf", ".inf",
                                                      "1e-45", "0.0", "-0", "1024", "1025", "65536", "100000"};
    static const std::vector<std::string> kSections = {"", "  "};
    static const std::vector<std::string> kBreakers = {"{", "[", "\"", "'", ":", "\t", "&", "*", "!", "%", "@",
                                                       "`", "|", ">", "- ", "? ", "\n  ", "#", ",", "}", "]"};
    switch (Pick(8)) {
      case 0: return SetValue(yaml, OneOf(kWrongTypes));
      case 1: return SetValue(yaml, OneOf(kNumbers));
      case 2: {  // a huge string
        const int len = 1 << Pick(18);
        return SetValue(yaml, std::string(len, static_cast<char>('a' + Pick(26))));
      }
      case 3: {  // an unknown key, at the top or inside the last section
        return absl::StrCat(yaml, OneOf(kSections), "zz_", Pick(1000), ": ", Pick(10), "\n");
      }
      case 4: {  // a line given twice
        std::vector<std::string> lines = absl::StrSplit(yaml, '\n');
        const int i = Pick(static_cast<int>(lines.size()));
        lines.insert(lines.begin() + i, lines[i]);
        return absl::StrJoin(lines, "\n");
      }
      case 5: {  // broken YAML: a stray token, or the document cut short
        const size_t at = yaml.empty() ? 0 : Pick(static_cast<int>(yaml.size()));
        if (Pick(2) == 0) return yaml.substr(0, at);
        return yaml.substr(0, at) + OneOf(kBreakers) + yaml.substr(at);
      }
      case 6: {  // deep nesting
        const int depth = 1 << Pick(17);
        if (Pick(2) == 0) return SetValue(yaml, std::string(depth, '[') + std::string(depth, ']'));
        std::string v;
        for (int i = 0; i < depth; ++i) v += "{a: ";
        return SetValue(yaml, v + "1" + std::string(depth, '}'));
      }
      default: {  // random bytes over a random stretch
        std::string out = yaml;
        const int n = 1 + Pick(16);
        for (int i = 0; i < n && !out.empty(); ++i) out[Pick(static_cast<int>(out.size()))] = static_cast<char>(Pick(256));
        return out;
      }
    }
  }

  std::mt19937 rng_;
};

TEST(JobSpecRandom, MalformedSpecsAreAnsweredWithANamedPath) {
  std::set<std::string> paths;
  CollectPaths(v1::JobSpec::descriptor(), "", paths);
  {
    auto base = ParseJobSpecYaml(kValid);
    ASSERT_TRUE(base.ok()) << base.status();
    ApplyDefaults(*base);
    ASSERT_TRUE(ValidateJobSpec(*base).ok()) << ValidateJobSpec(*base);
  }
  Mutator m(24);
  int refused = 0;
  for (int i = 0; i < 1000; ++i) {
    const std::string yaml = m.Mutate(kValid);
    const auto start = std::chrono::steady_clock::now();
    absl::Status st;
    auto spec = ParseJobSpecYaml(yaml);
    if (spec.ok()) {
      ApplyDefaults(*spec);
      st = ValidateJobSpec(*spec);
    } else {
      st = spec.status();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 5.0) << "case " << i;
    if (st.ok()) continue;
    ++refused;
    const std::string msg(st.message());
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << "case " << i << ": " << msg.substr(0, 300);
    EXPECT_LE(msg.size(), 4096u) << "case " << i << ": " << msg.substr(0, 300);
    EXPECT_TRUE(NamesASpecPath(msg, paths)) << "case " << i << ": " << msg.substr(0, 300) << "\n--- spec:\n"
                                            << yaml.substr(0, 600);
  }
  // The mutations are malformed: nearly all are refused.
  EXPECT_GT(refused, 800);
}

}  // namespace
}  // namespace loom::runtime::jobspec
