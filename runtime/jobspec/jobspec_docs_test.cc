// docs/user-guide.md's "Job spec reference" against loom.v1.JobSpec: every
// key a job spec takes is documented, and every key the reference names
// exists. A key is a dotted path to a field that is not a message (a
// repeated message, parallel.tp_plan, is one key).
//
// The reference's rows start with the keys they describe, as code spans in
// the first cell: `model.n_layer`, `n_head`, `d_model` (a span without a dot
// continues the path of the last span that had one) or `parallel.tp: auto`
// (a span with a space is a value, not a key).
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"
#include "proto/loom/v1/job.pb.h"

namespace loom::runtime::jobspec {
namespace {

namespace pb = google::protobuf;

void Keys(const pb::Descriptor* d, const std::string& prefix, std::set<std::string>* out) {
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    const std::string path = prefix.empty() ? f->name() : prefix + "." + f->name();
    if (f->message_type() != nullptr && !f->is_repeated()) {
      Keys(f->message_type(), path, out);
    } else {
      out->insert(path);
    }
  }
}

// The keys named in the first cells of the rows of `markdown`'s section
// headed `heading` (up to the next "## " heading).
std::set<std::string> DocumentedKeys(const std::string& markdown, const std::string& heading) {
  std::set<std::string> keys;
  std::istringstream in(markdown);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) {
      inside = line == heading;
      continue;
    }
    if (!inside || line.rfind("| `", 0) != 0) continue;
    const std::string cell = line.substr(2, line.find(" |", 2) - 2);
    std::string prefix;
    for (size_t open = cell.find('`'); open != std::string::npos; open = cell.find('`', open)) {
      const size_t close = cell.find('`', open + 1);
      if (close == std::string::npos) break;
      const std::string span = cell.substr(open + 1, close - open - 1);
      open = close + 1;
      if (span.find(' ') != std::string::npos) continue;
      const size_t dot = span.rfind('.');
      if (dot != std::string::npos) prefix = span.substr(0, dot);
      keys.insert(dot != std::string::npos || prefix.empty() ? span : prefix + "." + span);
    }
  }
  return keys;
}

// Lines of difference between the proto's keys and the documented ones.
std::string Differences(const std::set<std::string>& proto, const std::set<std::string>& documented) {
  std::string out;
  for (const auto& k : proto)
    if (!documented.count(k)) out += "  " + k + ": a job spec key docs/user-guide.md does not document\n";
  for (const auto& k : documented)
    if (!proto.count(k)) out += "  " + k + ": documented, but no job spec key\n";
  return out;
}

constexpr const char* kHeading = "## Job spec reference";

TEST(JobSpecDocs, TheReferenceNamesEveryKeyAndNoOther) {
  std::ifstream in("docs/user-guide.md");
  ASSERT_TRUE(in) << "docs/user-guide.md: cannot open";
  std::stringstream text;
  text << in.rdbuf();
  std::set<std::string> proto;
  Keys(v1::JobSpec::descriptor(), "", &proto);
  const std::set<std::string> documented = DocumentedKeys(text.str(), kHeading);
  ASSERT_GT(documented.size(), 20u) << "the section \"" << kHeading << "\" lists almost no keys";
  EXPECT_EQ(Differences(proto, documented), "");
}

// The check itself, on a planted reference: a continued path, a value span
// and a key in another section are read as they should be, and a missing
// and an unknown key are both reported.
TEST(JobSpecDocs, ReportsAMissingAndAnUnknownKey) {
  const std::string doc =
      "## Job spec reference\n"
      "| key | default |\n"
      "| `model.n_layer`, `n_head` | 4, 4 |\n"
      "| `parallel.tp: auto` | |\n"
      "| `name` | `job` |\n"
      "| `train.stepz` | 300 |\n"
      "## Elsewhere\n"
      "| `model.vocab` | 256 |\n";
  const std::set<std::string> documented = DocumentedKeys(doc, kHeading);
  EXPECT_EQ(documented, (std::set<std::string>{"model.n_layer", "model.n_head", "name", "train.stepz"}));
  const std::string diff =
      Differences({"model.n_layer", "model.n_head", "name", "train.steps"}, documented);
  EXPECT_EQ(diff,
            "  train.steps: a job spec key docs/user-guide.md does not document\n"
            "  train.stepz: documented, but no job spec key\n");
}

}  // namespace
}  // namespace loom::runtime::jobspec
