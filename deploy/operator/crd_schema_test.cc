// The TrainingJob CRD's schema for spec.job against the job spec proto. The
// API server prunes every field a structural schema does not name, so a key
// of proto/loom/v1/job.proto missing from deploy/base/crd.yaml is dropped
// from a TrainingJob without an error; a key the proto lacks is refused by
// the operator after the API server accepted it. Each message field must
// appear, with the schema type its proto type parses from, and nothing else.
#include <yaml-cpp/yaml.h>

#include <set>
#include <string>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"
#include "proto/loom/v1/job.pb.h"

namespace loom::deploy::operator_ {
namespace {

namespace pb = google::protobuf;

// Fields of JobSpec a TrainingJob sets elsewhere, with where.
const std::set<std::string> kSetElsewhere = {
    "JobSpec.max_restarts",  // spec.runPolicy.backoffLimit
};

// The schema type a field of this proto type is written as.
std::string SchemaType(const pb::FieldDescriptor* f) {
  if (f->is_repeated()) return "array";
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_INT32:
    case pb::FieldDescriptor::CPPTYPE_INT64:
    case pb::FieldDescriptor::CPPTYPE_UINT32:
    case pb::FieldDescriptor::CPPTYPE_UINT64: return "integer";
    case pb::FieldDescriptor::CPPTYPE_FLOAT:
    case pb::FieldDescriptor::CPPTYPE_DOUBLE: return "number";
    case pb::FieldDescriptor::CPPTYPE_BOOL: return "boolean";
    case pb::FieldDescriptor::CPPTYPE_MESSAGE: return "object";
    default: return "string";
  }
}

// Differences between a message and the schema object `node` describing it,
// one line each, with dotted paths from `path`.
void Compare(const pb::Descriptor* d, const YAML::Node& node, const std::string& path,
             std::vector<std::string>* out) {
  const YAML::Node props = node["properties"];
  if (!props || !props.IsMap()) {
    out->push_back(path + ": the schema lists no properties");
    return;
  }
  std::set<std::string> seen;
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    const std::string key = path.empty() ? f->name() : path + "." + f->name();
    if (kSetElsewhere.count(d->name() + "." + f->name())) continue;
    seen.insert(f->name());
    const YAML::Node p = props[f->name()];
    if (!p) {
      out->push_back(key + ": in the proto, missing from the CRD (the API server would drop it)");
      continue;
    }
    const std::string type = p["type"] ? p["type"].as<std::string>() : "";
    if (type != SchemaType(f)) {
      out->push_back(key + ": the CRD says type '" + type + "', the proto's " + f->type_name() + " needs '" +
                     SchemaType(f) + "'");
      continue;
    }
    if (f->is_repeated() && f->message_type() != nullptr) {
      Compare(f->message_type(), p["items"], key + "[]", out);
    } else if (f->message_type() != nullptr) {
      Compare(f->message_type(), p, key, out);
    }
  }
  for (const auto& kv : props) {
    const std::string name = kv.first.as<std::string>();
    if (!seen.count(name)) out->push_back((path.empty() ? name : path + "." + name) + ": in the CRD, not in the proto");
  }
}

YAML::Node JobSchema() {
  const YAML::Node crd = YAML::LoadFile("deploy/base/crd.yaml");
  return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["job"];
}

TEST(CrdSchema, SpecJobNamesEveryJobSpecFieldWithItsType) {
  std::vector<std::string> diffs;
  Compare(v1::JobSpec::descriptor(), JobSchema(), "", &diffs);
  std::string text;
  for (const auto& d : diffs) text += "  " + d + "\n";
  EXPECT_TRUE(diffs.empty()) << diffs.size() << " differences:\n" << text;
}

// The check itself: a schema without one of the proto's fields, with a
// field of the wrong type, and with a key the proto lacks is reported, each
// by its dotted path.
TEST(CrdSchema, ReportsAMissingAWrongAndAnUnknownField) {
  YAML::Node job = YAML::Clone(JobSchema());
  job["properties"]["resources"]["properties"].remove("ranks_per_gpu");
  job["properties"]["train"]["properties"]["steps"]["type"] = "string";
  job["properties"]["model"]["properties"]["n_layers"]["type"] = "integer";
  std::vector<std::string> diffs;
  Compare(v1::JobSpec::descriptor(), job, "", &diffs);
  auto has = [&](const std::string& prefix) {
    for (const auto& d : diffs)
      if (d.rfind(prefix, 0) == 0) return true;
    return false;
  };
  EXPECT_TRUE(has("resources.ranks_per_gpu: in the proto, missing from the CRD"));
  EXPECT_TRUE(has("train.steps: the CRD says type 'string'"));
  EXPECT_TRUE(has("model.n_layers: in the CRD, not in the proto"));
}

}  // namespace
}  // namespace loom::deploy::operator_
