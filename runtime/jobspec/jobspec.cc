#include "runtime/jobspec/jobspec.h"

#include <glob.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <fstream>
#include <limits>
#include <sstream>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/echo.h"
#include "base/status.h"
#include "collectives/process_group.h"
#include "compiler/schedule.h"
#include "parallel/parallel_check.h"
#include "runtime/data/tokenizer.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/reflection.h"

namespace loom::runtime::jobspec {
namespace {

namespace pb = google::protobuf;

std::string Join(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : absl::StrCat(prefix, ".", key);
}

// " (line L, column C)" of a node in the document (1-based), or "" when the
// node carries no position.
std::string At(const YAML::Node& n) {
  const YAML::Mark m = n.Mark();
  if (m.is_null()) return "";
  return absl::StrCat(" (line ", m.line + 1, ", column ", m.column + 1, ")");
}

absl::Status Bad(const std::string& path, absl::string_view what, const std::string& value, const YAML::Node& n) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": expected ", what, ", got '", EchoValue(value), "'", At(n)));
}

// A key that appears twice in one mapping (yaml-cpp keeps both).
absl::Status CheckDuplicateKeys(const YAML::Node& map, const std::string& path) {
  std::map<std::string, YAML::Node> seen;
  for (const auto& kv : map) {
    if (!kv.first.IsScalar())
      return absl::InvalidArgumentError(
          absl::StrCat(path.empty() ? "job spec" : path, ": a key must be a plain string", At(kv.first)));
    auto [it, fresh] = seen.emplace(kv.first.Scalar(), kv.first);
    if (!fresh)
      return absl::InvalidArgumentError(absl::StrCat(Join(path, EchoValue(kv.first.Scalar())), ": duplicate key",
                                                     At(kv.first), "; first given", At(it->second)));
  }
  return absl::OkStatus();
}

// The numeric fields' ranges (after defaults). `zero_is_default`: the field
// has a default that a 0 stands for over the API (proto3 cannot tell 0 from
// absent); in YAML an explicit 0 there is an error rather than the default.
struct Range {
  const char* path;
  double lo, hi;
  bool lo_open;          // (lo, hi] rather than [lo, hi]
  bool zero_is_default;
};
constexpr double kE9 = 1e9;
constexpr Range kRanges[] = {
    {"model.n_layer", 1, kMaxLayers, false, true},
    {"model.n_head", 1, kMaxHeads, false, true},
    {"model.n_kv_head", 1, kMaxHeads, false, true},
    {"model.d_model", 1, 65536, false, true},
    {"model.seq_len", 1, 1 << 20, false, true},
    {"model.vocab", 1, 1 << 24, false, true},
    {"model.ffn_hidden", 1, 1 << 18, false, true},
    {"model.rope_theta", 0, kE9, true, true},
    {"model.norm_eps", 0, 1, true, true},
    {"data.bigram.max_mib", 0, 1 << 20, false, true},      // 0 (absent): 64
    {"data.bigram.max_tokens", 0, 1e12, false, true},      // 0 (absent): 16777216
    {"train.steps", 1, kE9, false, true},
    {"train.batch_size", 1, 1 << 20, false, true},
    {"train.grad_accum_steps", 1, 1024, false, true},      // 0 (absent): 1
    {"train.lr", 0, 10, true, true},
    {"train.weight_decay", 0, 10, false, false},
    {"train.beta1", 0, 0.999999, true, true},
    {"train.beta2", 0, 0.999999, true, true},
    {"train.eps", 0, 1, true, true},
    {"train.grad_clip", 0, 1e6, false, false},
    {"train.warmup_steps", 0, kE9, false, false},
    {"train.eval_every", 1, kE9, false, true},
    {"train.eval_batches", 1, 1e6, false, true},
    {"train.log_every", 1, kE9, false, true},
    {"train.sample_tokens", 0, 1 << 20, false, false},     // absent: 200; 0: no sample
    {"train.min_lr", 0, 10, false, false},
    {"train.decay_steps", 0, kE9, false, false},           // wsd: >= 2, checked with the schedule
    {"parallel.dp", 1, kMaxRanks, false, true},
    {"parallel.tp", 1, kMaxTp, false, true},               // tp: auto is checked by the planner
    // parallel.zero_stage: parallel::ValidateParallelSection
    {"checkpoint.every", 0, kE9, false, false},
    {"checkpoint.keep", 0, 1e6, false, true},              // 0 (absent): 3
    {"resources.ranks_per_gpu", 1, kMaxRanksPerGpu, false, true},  // 0 (absent): 1
    {"resources.threads_per_rank", 0, kMaxThreadsPerRank, false, false},  // 0: a share of the node's CPUs
    {"max_restarts", 0, 1000, false, false},
    {"priority", -1000, 1000, false, false},
};

// The field at a dotted path of JobSpec, and the message holding it.
const pb::FieldDescriptor* FieldAt(const pb::Message& root, const std::string& path, const pb::Message** holder) {
  const pb::Message* m = &root;
  size_t start = 0;
  for (;;) {
    const size_t dot = path.find('.', start);
    const pb::FieldDescriptor* f = m->GetDescriptor()->FindFieldByName(path.substr(start, dot - start));
    if (f == nullptr) return nullptr;
    if (dot == std::string::npos) {
      *holder = m;
      return f;
    }
    if (f->cpp_type() != pb::FieldDescriptor::CPPTYPE_MESSAGE) return nullptr;
    m = &m->GetReflection()->GetMessage(*m, f);
    start = dot + 1;
  }
}

double NumberOf(const pb::Message& m, const pb::FieldDescriptor* f) {
  const pb::Reflection* r = m.GetReflection();
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_INT32: return r->GetInt32(m, f);
    case pb::FieldDescriptor::CPPTYPE_INT64: return static_cast<double>(r->GetInt64(m, f));
    case pb::FieldDescriptor::CPPTYPE_UINT32: return r->GetUInt32(m, f);
    case pb::FieldDescriptor::CPPTYPE_UINT64: return static_cast<double>(r->GetUInt64(m, f));
    case pb::FieldDescriptor::CPPTYPE_FLOAT: return r->GetFloat(m, f);
    case pb::FieldDescriptor::CPPTYPE_DOUBLE: return r->GetDouble(m, f);
    default: return 0;
  }
}

// A whole number in full ("1000000000"), anything else as StrCat prints it.
std::string Num(double x) {
  if (std::floor(x) == x && std::fabs(x) < 9e15) return absl::StrCat(static_cast<int64_t>(x));
  return absl::StrCat(x);
}

std::string RangeText(const Range& r) {
  return absl::StrCat("must be in ", r.lo_open ? "(" : "[", Num(r.lo), ", ", Num(r.hi), "]");
}

// An explicit 0 where 0 would stand for the default (or is invalid): an
// error naming the field, so that `steps: 0` is not read as 300 steps.
absl::Status CheckExplicitZero(const pb::Message& msg, const pb::FieldDescriptor* f, const YAML::Node& node,
                               const std::string& path) {
  if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_STRING || f->cpp_type() == pb::FieldDescriptor::CPPTYPE_BOOL ||
      NumberOf(msg, f) != 0)
    return absl::OkStatus();
  if (path == "data.val_fraction" || path == "data.mlm.rate")
    return absl::InvalidArgumentError(absl::StrCat(path, ": must be in (0, 1], got 0", At(node),
                                                   "; leave the key out for the default"));
  for (const Range& r : kRanges) {
    if (r.zero_is_default && path == r.path)
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", RangeText(r), ", got 0", At(node),
                                                     "; leave the key out for the default"));
  }
  return absl::OkStatus();
}

absl::Status SetScalar(pb::Message& msg, const pb::FieldDescriptor* f, const YAML::Node& node,
                       const std::string& path) {
  if (!node.IsScalar()) return absl::InvalidArgumentError(absl::StrCat(path, ": expected a scalar value", At(node)));
  const std::string v = node.Scalar();
  const pb::Reflection* r = msg.GetReflection();
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_INT32: {
      int32_t x;
      if (!absl::SimpleAtoi(v, &x)) return Bad(path, "an integer", v, node);
      r->SetInt32(&msg, f, x);
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_INT64: {
      int64_t x;
      if (!absl::SimpleAtoi(v, &x)) return Bad(path, "an integer", v, node);
      r->SetInt64(&msg, f, x);
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_UINT64: {
      uint64_t x;
      if (!absl::SimpleAtoi(v, &x)) return Bad(path, "a non-negative integer", v, node);
      r->SetUInt64(&msg, f, x);
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_UINT32: {
      uint32_t x;
      if (!absl::SimpleAtoi(v, &x)) return Bad(path, "a non-negative integer", v, node);
      r->SetUInt32(&msg, f, x);
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_FLOAT: {
      float x;
      if (!absl::SimpleAtof(v, &x)) return Bad(path, "a number", v, node);
      r->SetFloat(&msg, f, x);
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_DOUBLE: {
      double x;
      if (!absl::SimpleAtod(v, &x)) return Bad(path, "a number", v, node);
      r->SetDouble(&msg, f, x);
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_BOOL: {
      bool x;
      if (!absl::SimpleAtob(v, &x)) return Bad(path, "true or false", v, node);
      r->SetBool(&msg, f, x);
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_STRING:
      r->SetString(&msg, f, v);
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(path, ": unsupported field type", At(node)));
  }
  return absl::OkStatus();
}

// Appends one rule of parallel.tp_plan; a pattern may appear once.
absl::Status AddTpRule(v1::ParallelSpec& p, const YAML::Node& pattern, const YAML::Node& style) {
  if (!pattern.IsScalar() || !style.IsScalar())
    return absl::InvalidArgumentError(
        absl::StrCat("parallel.tp_plan: expected pattern: style pairs of plain strings", At(pattern)));
  for (int i = 0; i < p.tp_plan_size(); ++i)
    if (p.tp_plan(i).pattern() == pattern.Scalar())
      return absl::InvalidArgumentError(absl::StrCat("parallel.tp_plan: pattern '", EchoValue(pattern.Scalar()),
                                                     "' appears twice", At(pattern)));
  v1::TpRule* r = p.add_tp_plan();
  r->set_pattern(pattern.Scalar());
  r->set_style(style.Scalar());
  return absl::OkStatus();
}

// parallel.tp_plan: a mapping of name patterns to styles, kept in the
// document's order (the first matching rule wins); or, for a document whose
// mappings lose their order (JSON through Kubernetes), a list of
// {pattern: P, style: S} entries.
absl::Status FillTpPlan(v1::ParallelSpec& p, const YAML::Node& node) {
  p.clear_tp_plan();
  if (node.IsNull()) return absl::OkStatus();
  if (node.IsMap()) {
    for (const auto& kv : node) LOOM_RETURN_IF_ERROR(AddTpRule(p, kv.first, kv.second));
    return absl::OkStatus();
  }
  const char* kExpected =
      "parallel.tp_plan: expected a mapping of parameter-name patterns to styles, e.g. "
      "{\"h.*.attn.qkv.weight\": colwise}, or a list of {pattern: P, style: S}";
  if (!node.IsSequence()) return absl::InvalidArgumentError(absl::StrCat(kExpected, At(node)));
  for (const auto& entry : node) {
    if (!entry.IsMap() || entry.size() != 2 || !entry["pattern"] || !entry["style"])
      return absl::InvalidArgumentError(absl::StrCat(kExpected, At(entry)));
    LOOM_RETURN_IF_ERROR(AddTpRule(p, entry["pattern"], entry["style"]));
  }
  return absl::OkStatus();
}

absl::Status FillMessage(pb::Message& msg, const YAML::Node& node, const std::string& path) {
  if (!node.IsMap())
    return absl::InvalidArgumentError(
        absl::StrCat(path.empty() ? "job spec" : path, ": expected a mapping of keys to values", At(node)));
  LOOM_RETURN_IF_ERROR(CheckDuplicateKeys(node, path));
  const pb::Descriptor* d = msg.GetDescriptor();
  for (const auto& kv : node) {
    const std::string key = kv.first.Scalar();
    const std::string kpath = Join(path, key);
    const pb::FieldDescriptor* f = d->FindFieldByName(key);
    if (f == nullptr) {
      std::string known;
      for (int i = 0; i < d->field_count(); ++i) absl::StrAppend(&known, i ? ", " : "", d->field(i)->name());
      return absl::InvalidArgumentError(absl::StrCat("unknown key '", Join(path, EchoValue(key)), "'", At(kv.first),
                                                     " (known keys here: ", known, ")"));
    }
    if (kpath == "parallel.tp_plan") {
      LOOM_RETURN_IF_ERROR(FillTpPlan(static_cast<v1::ParallelSpec&>(msg), kv.second));
      continue;
    }
    if (f->is_repeated())
      return absl::InvalidArgumentError(absl::StrCat(kpath, ": lists are not supported", At(kv.second)));
    if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      if (kv.second.IsNull()) continue;
      LOOM_RETURN_IF_ERROR(FillMessage(*msg.GetReflection()->MutableMessage(&msg, f), kv.second, kpath));
    } else {
      // `tp: auto` is shorthand for the planner's choice.
      if (kpath == "parallel.tp" && kv.second.IsScalar() && kv.second.Scalar() == "auto") {
        static_cast<v1::ParallelSpec&>(msg).set_tp_auto(true);
        continue;
      }
      LOOM_RETURN_IF_ERROR(SetScalar(msg, f, kv.second, kpath));
      LOOM_RETURN_IF_ERROR(CheckExplicitZero(msg, f, kv.second, kpath));
    }
  }
  return absl::OkStatus();
}

void EmitMessage(YAML::Emitter& out, const pb::Message& msg) {
  out << YAML::BeginMap;
  const pb::Reflection* r = msg.GetReflection();
  std::vector<const pb::FieldDescriptor*> fields;
  r->ListFields(msg, &fields);
  for (const pb::FieldDescriptor* f : fields) {
    out << YAML::Key << f->name() << YAML::Value;
    if (f->is_repeated() && f->message_type() == v1::TpRule::descriptor()) {  // parallel.tp_plan
      out << YAML::BeginMap;
      for (const auto& rule : static_cast<const v1::ParallelSpec&>(msg).tp_plan())
        out << YAML::Key << YAML::DoubleQuoted << rule.pattern() << YAML::Value << rule.style();
      out << YAML::EndMap;
      continue;
    }
    switch (f->cpp_type()) {
      case pb::FieldDescriptor::CPPTYPE_MESSAGE: EmitMessage(out, r->GetMessage(msg, f)); break;
      case pb::FieldDescriptor::CPPTYPE_INT32: out << r->GetInt32(msg, f); break;
      case pb::FieldDescriptor::CPPTYPE_INT64: out << r->GetInt64(msg, f); break;
      case pb::FieldDescriptor::CPPTYPE_UINT32: out << r->GetUInt32(msg, f); break;
      case pb::FieldDescriptor::CPPTYPE_UINT64: out << r->GetUInt64(msg, f); break;
      case pb::FieldDescriptor::CPPTYPE_FLOAT: out << r->GetFloat(msg, f); break;
      case pb::FieldDescriptor::CPPTYPE_DOUBLE: out << r->GetDouble(msg, f); break;
      case pb::FieldDescriptor::CPPTYPE_BOOL: out << r->GetBool(msg, f); break;
      case pb::FieldDescriptor::CPPTYPE_STRING: out << r->GetString(msg, f); break;
      default: out << "?"; break;
    }
  }
  out << YAML::EndMap;
}

absl::Status Field(bool ok, const std::string& key, const std::string& value, absl::string_view why) {
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(key, ": ", why, " (got ", EchoValue(value), ")"));
}

// model.onnx and its loss: the file exists; the loss fields name known
// values. The import itself is checked where the model is loaded
// (runtime/train/onnx_model.h).
absl::Status ValidateOnnxModel(const v1::JobSpec& s) {
  const v1::ModelSpec& m = s.model();
  const bool onnx = m.family() == "onnx";
  LOOM_RETURN_IF_ERROR(Field(onnx == !m.onnx().empty(), onnx ? "model.onnx" : "model.family",
                             onnx ? m.onnx() : m.family(), "model.onnx (a path) goes with model.family onnx"));
  if (!onnx) {
    LOOM_RETURN_IF_ERROR(Field(!m.has_loss() && m.token_input().empty(), "model.loss", m.family(),
                               "model.loss and model.token_input apply to ONNX models only"));
    return absl::OkStatus();
  }
  std::error_code ec;
  LOOM_RETURN_IF_ERROR(Field(std::filesystem::is_regular_file(m.onnx(), ec), "model.onnx", m.onnx(), "no such file"));
  LOOM_RETURN_IF_ERROR(Field(m.loss().kind().empty() || m.loss().kind() == "cross_entropy", "model.loss.kind",
                             m.loss().kind(), "expected cross_entropy (or empty: the model's own scalar loss, else cross_entropy)"));
  // What the ONNX path does not do yet: checkpoints, init_from. (The
  // parallel section, tp_plan included, is checked by
  // parallel::ValidateParallelSection; with device: cuda, whether the graph
  // lowers to CUDA by runtime/train/onnx_model.h's CheckOnnxJob.)
  LOOM_RETURN_IF_ERROR(Field(s.checkpoint().every() == 0, "checkpoint.every", absl::StrCat(s.checkpoint().every()),
                             "checkpoints of ONNX models are not supported yet"));
  LOOM_RETURN_IF_ERROR(Field(s.init_from().empty(), "init_from", s.init_from(),
                             "ONNX models start from the file's initializers"));
  return absl::OkStatus();
}

// A file or directory exists at `path`, or (a glob) some file matches it.
bool PathExists(const std::string& path) {
  std::error_code ec;
  if (path.find_first_of("*?[") == std::string::npos)
    return std::filesystem::is_regular_file(path, ec) || std::filesystem::is_directory(path, ec);
  glob_t g;
  const bool any = ::glob(path.c_str(), 0, nullptr, &g) == 0 && g.gl_pathc > 0;
  ::globfree(&g);
  return any;
}

absl::Status ValidateMlm(const v1::JobSpec& s) {
  const auto& d = s.data();
  const auto& o = d.mlm();
  const bool builtin = s.model().family() == "gpt" || s.model().family() == "llama";
  auto str = [](auto v) { return absl::StrCat(v); };
  if (d.kind() != "mlm")
    return Field(!d.has_mlm(), "data.mlm", "set", absl::StrCat("applies to data.kind: mlm, not ", d.kind()));
  LOOM_RETURN_IF_ERROR(Field(o.rate() > 0 && o.rate() <= 1, "data.mlm.rate", str(o.rate()), "must be in (0, 1]"));
  LOOM_RETURN_IF_ERROR(Field(o.has_mask_token(), "data.mlm.mask_token", "nothing", "is required for data.kind: mlm"));
  LOOM_RETURN_IF_ERROR(Field(o.mask_token() >= 0 && (!builtin || o.mask_token() < s.model().vocab()),
                             "data.mlm.mask_token", str(o.mask_token()),
                             absl::StrCat("must be in [0, model.vocab = ", s.model().vocab(), ")")));
  LOOM_RETURN_IF_ERROR(Field(!builtin || o.ignore_index() == -100, "data.mlm.ignore_index", str(o.ignore_index()),
                             "built-in model families ignore targets equal to -100"));
  LOOM_RETURN_IF_ERROR(Field(o.random_fraction() >= 0 && o.keep_fraction() >= 0 &&
                                 o.random_fraction() + o.keep_fraction() <= 1,
                             "data.mlm.random_fraction", str(o.random_fraction()),
                             absl::StrCat("random_fraction and keep_fraction (", o.keep_fraction(),
                                          ") must be >= 0 and sum to at most 1")));
  return absl::OkStatus();
}

absl::Status ValidateDataSection(const v1::JobSpec& s) {
  const auto& d = s.data();
  const auto& m = s.model();
  auto str = [](auto v) { return absl::StrCat(v); };
  const std::string& f = d.format();
  LOOM_RETURN_IF_ERROR(Field(f == "auto" || f == "text" || f == "tokens" || f == "llmc" || f == "npy", "data.format",
                             f, "expected auto, text, tokens, llmc or npy"));
  LOOM_RETURN_IF_ERROR(Field(f != "text" || m.vocab() >= 256, "model.vocab", str(m.vocab()),
                             "the byte tokenizer needs vocab >= 256"));
  LOOM_RETURN_IF_ERROR(Field(d.tokens_dtype() == "u16" || d.tokens_dtype() == "u32", "data.tokens_dtype",
                             d.tokens_dtype(), "expected u16 or u32"));
  LOOM_RETURN_IF_ERROR(Field(d.kind() == "causal" || d.kind() == "mlm" || d.kind() == "pairs", "data.kind", d.kind(),
                             "expected causal, mlm or pairs"));
  LOOM_RETURN_IF_ERROR(Field(d.order() == "shuffle" || d.order() == "sequential", "data.order", d.order(),
                             "expected shuffle or sequential"));
  if (d.val().empty()) {
    LOOM_RETURN_IF_ERROR(Field(d.val_fraction() > 0 && d.val_fraction() < 1, "data.val_fraction",
                               str(d.val_fraction()), "must be in (0, 1)"));
  } else {
    LOOM_RETURN_IF_ERROR(Field(d.val_fraction() == 0, "data.val_fraction", str(d.val_fraction()),
                               "give data.val (validation shards) or data.val_fraction, not both"));
    LOOM_RETURN_IF_ERROR(Field(PathExists(d.val()), "data.val", d.val(), "no such file, directory or glob match"));
  }
  if (!d.path().empty())
    LOOM_RETURN_IF_ERROR(Field(PathExists(d.path()), "data.path", d.path(), "no such file, directory or glob match"));
  LOOM_RETURN_IF_ERROR(ValidateMlm(s));
  const bool pairs = d.kind() == "pairs";
  LOOM_RETURN_IF_ERROR(Field(pairs != d.labels().empty(), "data.labels", d.labels().empty() ? "nothing" : d.labels(),
                             pairs ? "is required for data.kind: pairs" : "applies to data.kind: pairs"));
  LOOM_RETURN_IF_ERROR(Field(d.labels().empty() || PathExists(d.labels()), "data.labels", d.labels(), "no such file"));
  LOOM_RETURN_IF_ERROR(Field(d.val_labels().empty() || PathExists(d.val_labels()), "data.val_labels", d.val_labels(),
                             "no such file"));
  LOOM_RETURN_IF_ERROR(Field(!pairs || d.val().empty() == d.val_labels().empty(), "data.val_labels",
                             d.val_labels().empty() ? "nothing" : d.val_labels(),
                             "data.val and data.val_labels go together for data.kind: pairs"));
  LOOM_RETURN_IF_ERROR(Field(pairs || d.val_labels().empty(), "data.val_labels", d.val_labels(),
                             "applies to data.kind: pairs"));
  LOOM_RETURN_IF_ERROR(Field(!pairs || !d.path().empty(), "data.path", "nothing",
                             "data.kind: pairs needs the inputs .npy"));
  LOOM_RETURN_IF_ERROR(Field(!pairs || f == "auto" || f == "npy", "data.format", f,
                             "data.kind: pairs reads .npy files (auto or npy)"));
  const bool builtin = m.family() == "gpt" || m.family() == "llama";
  for (const auto& [key, name, want] : {std::tuple<const char*, std::string, const char*>{"data.inputs.x", d.inputs().x(), "x"},
                                        {"data.inputs.y", d.inputs().y(), "y"}})
    LOOM_RETURN_IF_ERROR(Field(!builtin || name.empty() || name == want, key, name,
                               absl::StrCat("model family ", m.family(), " names its inputs x and y")));
  LOOM_RETURN_IF_ERROR(Field(d.bigram().max_mib() >= 0, "data.bigram.max_mib", str(d.bigram().max_mib()),
                             "must not be negative"));
  LOOM_RETURN_IF_ERROR(Field(d.bigram().max_tokens() >= 0, "data.bigram.max_tokens", str(d.bigram().max_tokens()),
                             "must not be negative"));
  return absl::OkStatus();
}

absl::Status CheckRanges(const v1::JobSpec& s) {
  for (const Range& r : kRanges) {
    if (absl::string_view(r.path) == "parallel.tp" && s.parallel().tp_auto()) continue;
    const pb::Message* holder = nullptr;
    const pb::FieldDescriptor* f = FieldAt(s, r.path, &holder);
    if (f == nullptr) return absl::InternalError(absl::StrCat("job spec range table: no field ", r.path));
    const double v = NumberOf(*holder, f);
    const bool ok = (r.lo_open ? v > r.lo : v >= r.lo) && v <= r.hi;  // false for NaN
    LOOM_RETURN_IF_ERROR(Field(ok, r.path, Num(v), RangeText(r)));
  }
  return absl::OkStatus();
}

// train.grad_accum_steps splits train.batch_size into equal micro-batches,
// each of which the dp ranks split again.
absl::Status CheckGradAccum(const v1::JobSpec& s) {
  const auto& t = s.train();
  const int k = t.grad_accum_steps();
  LOOM_RETURN_IF_ERROR(Field(k >= 1, "train.grad_accum_steps", absl::StrCat(k), "must be positive"));
  LOOM_RETURN_IF_ERROR(Field(t.batch_size() % k == 0, "train.grad_accum_steps", absl::StrCat(k),
                             absl::StrCat("must divide train.batch_size = ", t.batch_size(),
                                          " (the batch of one update, split into micro-batches)")));
  if (k == 1) return absl::OkStatus();
  const int dp = std::max(1, s.parallel().dp());
  LOOM_RETURN_IF_ERROR(Field((t.batch_size() / k) % dp == 0, "train.grad_accum_steps", absl::StrCat(k),
                             absl::StrCat("the micro-batch train.batch_size / grad_accum_steps = ",
                                          t.batch_size() / k, " must divide by parallel.dp = ", dp)));
  const std::string what = absl::StrCat(k);
  LOOM_RETURN_IF_ERROR(Field(s.device() != "cuda", "train.grad_accum_steps", what,
                             "accumulation runs on device: cpu for now"));
  LOOM_RETURN_IF_ERROR(Field(s.model().family() != "onnx", "train.grad_accum_steps", what,
                             "accumulation applies to the built-in families (gpt, llama) for now"));
  return absl::OkStatus();
}

// Products of sizes, in int64 (each factor is bounded above, so none
// overflows): the world size and the parameter count.
absl::Status CheckProducts(const v1::JobSpec& s) {
  const auto& p = s.parallel();
  const int64_t world = int64_t{p.dp()} * std::max<int64_t>(1, p.tp());
  LOOM_RETURN_IF_ERROR(Field(world <= kMaxRanks, "parallel.dp", absl::StrCat("dp=", p.dp(), ", tp=", p.tp()),
                             absl::StrCat("dp x tp must be at most ", kMaxRanks, " ranks")));
  const auto& m = s.model();
  if (m.family() == "onnx") return absl::OkStatus();
  const int64_t c = m.d_model(), L = m.n_layer(), ffn = m.ffn_hidden(), v = m.vocab();
  const int64_t kv = c / m.n_head() * m.n_kv_head();
  const int64_t params = v * c + int64_t{m.seq_len()} * c + L * (2 * c * c + 2 * c * kv + 3 * c * ffn);
  LOOM_RETURN_IF_ERROR(Field(params <= kMaxParameters, "model", absl::StrCat(params, " parameters"),
                             absl::StrCat("the model may have at most ", kMaxParameters, " parameters")));
  return absl::OkStatus();
}

// A training state kept in bf16 on the GPU (`field`: `value`): device: cuda,
// precision bf16 and one rank for now. `gpu`, `bf16` and `one`: what the
// error says for each ("<field>: <gpu>; device: cpu (got <value>)").
absl::Status CheckOneBf16CudaRank(const v1::JobSpec& s, const char* field, const std::string& value,
                                  const char* gpu, const char* bf16, const char* one) {
  LOOM_RETURN_IF_ERROR(
      Field(s.device() == "cuda", field, value, absl::StrCat(gpu, " (device: cuda); device: ", s.device())));
  LOOM_RETURN_IF_ERROR(Field(s.train().precision() == "bf16", field, value, bf16));
  const int64_t ranks = int64_t{std::max(1, s.parallel().dp())} * std::max(1, s.parallel().tp());
  return Field(ranks == 1 && !s.parallel().tp_auto(), field, value,
               absl::StrCat(one, " one rank for now (parallel.dp x parallel.tp = ", ranks,
                            s.parallel().tp_auto() ? ", tp_auto" : "", ")"));
}

// train.memory: standard or lean; lean needs one CUDA rank in bf16.
// train.offload_optimizer_state: device: cuda.
// train.grad_precision: f32 or bf16; bf16 needs one CUDA rank in bf16, lean
// takes no f32.
absl::Status CheckMemory(const v1::JobSpec& s) {
  LOOM_RETURN_IF_ERROR(Field(!s.train().offload_optimizer_state() || s.device() == "cuda",
                             "train.offload_optimizer_state", "true",
                             absl::StrCat("moves the optimizer state off a GPU (device: cuda); device: ", s.device())));
  const std::string& mem = s.train().memory();
  LOOM_RETURN_IF_ERROR(
      Field(mem.empty() || mem == "standard" || mem == "lean", "train.memory", mem, "expected standard or lean"));
  const std::string& gp = s.train().grad_precision();
  LOOM_RETURN_IF_ERROR(
      Field(gp.empty() || gp == "f32" || gp == "bf16", "train.grad_precision", gp, "expected f32 or bf16"));
  LOOM_RETURN_IF_ERROR(Field(gp != "f32" || mem != "lean", "train.grad_precision", gp,
                             "train.memory: lean stores the gradients bf16; drop the field or set bf16"));
  if (mem == "lean")
    LOOM_RETURN_IF_ERROR(CheckOneBf16CudaRank(s, "train.memory", mem, "lean stores the training state on a GPU",
                                              "lean keeps bf16 gradients and states: set train.precision: bf16",
                                              "lean runs"));
  if (gp == "bf16")
    LOOM_RETURN_IF_ERROR(CheckOneBf16CudaRank(s, "train.grad_precision", gp, "bf16 gradients live on a GPU",
                                              "bf16 gradients need train.precision: bf16",
                                              "bf16 gradients run"));
  return absl::OkStatus();
}

// parallel.backend parses as the process group reads it, and its CUDA
// backend can serve the job's placement: NCCL takes one rank per GPU. A
// device: cuda job's collectives run on CUDA tensors, which only NCCL and
// cuda:gloo (a "cuda:gloo" entry; plain gloo, ucx and tcp are CPU
// backends) take.
absl::Status CheckBackend(const v1::JobSpec& s) {
  const std::string& b = s.parallel().backend();
  auto spec = collectives::ParseBackendSpec(b);
  LOOM_RETURN_IF_ERROR(Field(spec.ok(), "parallel.backend", b, spec.ok() ? "" : std::string(spec.status().message())));
  auto it = spec->by_device.find(DeviceKind::kCUDA);
  const std::string& cuda = it == spec->by_device.end() ? spec->default_backend : it->second;
  const int32_t per_gpu = s.resources().ranks_per_gpu();
  const bool takes_cuda = cuda == "nccl" || (it != spec->by_device.end() && cuda == "gloo");
  LOOM_RETURN_IF_ERROR(Field(s.device() != "cuda" || takes_cuda, "parallel.backend", b,
                             absl::StrCat("device: cuda needs a backend for CUDA tensors, cuda:nccl or cuda:gloo (\"",
                                          DefaultBackend(std::max(1, per_gpu)), "\"); this spec sends them to ", cuda,
                                          ", which runs on the CPU only")));
  LOOM_RETURN_IF_ERROR(Field(s.device() != "cuda" || per_gpu <= 1 || cuda != "nccl", "parallel.backend", b,
                             absl::StrCat("NCCL takes one rank per GPU, but resources.ranks_per_gpu = ", per_gpu,
                                          "; use cuda:gloo (\"cpu:gloo,cuda:gloo\") or ranks_per_gpu: 1")));
  return absl::OkStatus();
}

absl::Status CheckStringSizes(const pb::Message& msg, const std::string& path) {
  const pb::Reflection* r = msg.GetReflection();
  std::vector<const pb::FieldDescriptor*> fields;
  r->ListFields(msg, &fields);
  for (const pb::FieldDescriptor* f : fields) {
    const std::string fpath = Join(path, f->name());
    if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      const int n = f->is_repeated() ? r->FieldSize(msg, f) : 1;
      for (int i = 0; i < n; ++i)
        LOOM_RETURN_IF_ERROR(CheckStringSizes(f->is_repeated() ? r->GetRepeatedMessage(msg, f, i) : r->GetMessage(msg, f),
                                              f->is_repeated() ? absl::StrCat(fpath, "[", i, "]") : fpath));
    } else if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_STRING && !f->is_repeated()) {
      const std::string v = r->GetString(msg, f);
      LOOM_RETURN_IF_ERROR(Field(v.size() <= kMaxStringBytes, fpath, v,
                                 absl::StrCat("longer than ", kMaxStringBytes, " bytes")));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateStringSizes(const v1::JobSpec& spec) { return CheckStringSizes(spec, ""); }

absl::StatusOr<v1::JobSpec> ParseJobSpecYaml(absl::string_view yaml) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed YAML at line ", e.mark.line + 1, ", column ",
                                                   e.mark.column + 1, ": ", EchoValue(e.msg)));
  }
  v1::JobSpec spec;
  if (root.IsNull()) return absl::InvalidArgumentError("job spec is empty");
  try {
    LOOM_RETURN_IF_ERROR(FillMessage(spec, root, ""));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed YAML at line ", e.mark.line + 1, ", column ",
                                                   e.mark.column + 1, ": ", EchoValue(e.msg)));
  }
  return spec;
}

std::string DefaultBackend(int32_t ranks_per_gpu) {
  return ranks_per_gpu > 1 ? "cpu:gloo,cuda:gloo" : "cpu:gloo,cuda:nccl";
}

// Llama's SwiGLU width rounds 8/3 d up to a multiple of 64; GPT's is 4 d.
// Computed in 64 bits and clamped, since defaults apply before the range
// checks: an out-of-range d_model is then reported under its own name.
int32_t DefaultFfnHidden(const std::string& family, int32_t d_model) {
  const int64_t d = d_model;
  const int64_t ffn = family == "llama" ? (8 * d / 3 + 63) / 64 * 64 : 4 * d;
  return static_cast<int32_t>(std::clamp<int64_t>(ffn, std::numeric_limits<int32_t>::min(),
                                                  std::numeric_limits<int32_t>::max()));
}

void ApplyDefaults(v1::JobSpec& s) {
  auto* m = s.mutable_model();
  if (m->family().empty()) m->set_family(m->onnx().empty() ? "gpt" : "onnx");
  if (m->family() == "onnx") {
    if (m->loss().target().empty()) m->mutable_loss()->set_target("shifted_inputs");
    if (!m->loss().has_ignore_index()) m->mutable_loss()->set_ignore_index(-100);
  }
  if (m->n_layer() == 0) m->set_n_layer(4);
  if (m->n_head() == 0) m->set_n_head(4);
  if (m->d_model() == 0) m->set_d_model(256);
  if (m->seq_len() == 0) m->set_seq_len(256);
  if (m->vocab() == 0) m->set_vocab(256);
  if (m->n_kv_head() == 0) m->set_n_kv_head(m->n_head());
  if (m->norm_eps() == 0) m->set_norm_eps(1e-5f);
  if (m->rope_theta() == 0) m->set_rope_theta(10000.f);
  if (m->ffn_hidden() == 0) m->set_ffn_hidden(DefaultFfnHidden(m->family(), m->d_model()));
  auto* d = s.mutable_data();
  if (d->format().empty()) d->set_format("auto");
  if (d->val_fraction() == 0 && d->val().empty()) d->set_val_fraction(0.1f);
  if (d->tokens_dtype().empty()) d->set_tokens_dtype("u16");
  if (d->kind().empty()) d->set_kind("causal");
  if (d->order().empty()) d->set_order("shuffle");
  if (d->kind() == "mlm") {
    if (d->mlm().rate() == 0) d->mutable_mlm()->set_rate(0.15f);
    if (!d->mlm().has_ignore_index()) d->mutable_mlm()->set_ignore_index(-100);
  }
  auto* t = s.mutable_train();
  if (t->steps() == 0) t->set_steps(300);
  if (t->batch_size() == 0) t->set_batch_size(8);
  if (t->grad_accum_steps() == 0) t->set_grad_accum_steps(1);
  if (t->lr() == 0) t->set_lr(1e-3f);
  if (t->beta1() == 0) t->set_beta1(0.9f);
  if (t->beta2() == 0) t->set_beta2(0.95f);
  if (t->eps() == 0) t->set_eps(1e-8f);
  if (t->eval_every() == 0) t->set_eval_every(100);
  if (t->eval_batches() == 0) t->set_eval_batches(8);
  if (t->log_every() == 0) t->set_log_every(10);
  if (t->precision().empty()) t->set_precision("f32");
  if (!t->has_sample_tokens()) t->set_sample_tokens(200);
  auto* p = s.mutable_parallel();
  if (p->dp() == 0) p->set_dp(1);
  if (p->tp() == 0 && !p->tp_auto()) p->set_tp(1);
  auto* r = s.mutable_resources();
  if (r->ranks_per_gpu() == 0) r->set_ranks_per_gpu(1);
  if (p->backend().empty()) p->set_backend(DefaultBackend(r->ranks_per_gpu()));
  if (s.device().empty()) s.set_device("cpu");
  if (s.name().empty()) s.set_name("job");
}

absl::Status ValidateJobSpec(const v1::JobSpec& s) {
  LOOM_RETURN_IF_ERROR(ValidateStringSizes(s));
  LOOM_RETURN_IF_ERROR(CheckRanges(s));
  const auto& m = s.model();
  auto str = [](auto v) { return absl::StrCat(v); };
  LOOM_RETURN_IF_ERROR(Field(m.family() == "gpt" || m.family() == "llama" || m.family() == "onnx", "model.family",
                             m.family(), "expected gpt, llama or onnx"));
  LOOM_RETURN_IF_ERROR(ValidateOnnxModel(s));
  LOOM_RETURN_IF_ERROR(Field(m.n_layer() > 0, "model.n_layer", str(m.n_layer()), "must be positive"));
  LOOM_RETURN_IF_ERROR(Field(m.n_head() > 0, "model.n_head", str(m.n_head()), "must be positive"));
  LOOM_RETURN_IF_ERROR(Field(m.d_model() > 0, "model.d_model", str(m.d_model()), "must be positive"));
  LOOM_RETURN_IF_ERROR(Field(m.d_model() % m.n_head() == 0, "model.d_model", str(m.d_model()),
                             absl::StrCat("must be divisible by model.n_head = ", m.n_head())));
  LOOM_RETURN_IF_ERROR(Field(m.n_kv_head() > 0 && m.n_head() % m.n_kv_head() == 0, "model.n_kv_head",
                             str(m.n_kv_head()), absl::StrCat("must divide model.n_head = ", m.n_head())));
  LOOM_RETURN_IF_ERROR(Field(m.family() != "gpt" || m.n_kv_head() == m.n_head(), "model.n_kv_head",
                             str(m.n_kv_head()),
                             absl::StrCat("the gpt family has no grouped-query attention (leave it out or set it to "
                                          "model.n_head = ", m.n_head(), ")")));
  LOOM_RETURN_IF_ERROR(Field(m.family() != "llama" || (m.d_model() / m.n_head()) % 2 == 0, "model.d_model",
                             str(m.d_model()), "llama needs an even head dimension for RoPE"));
  LOOM_RETURN_IF_ERROR(Field(m.seq_len() > 0, "model.seq_len", str(m.seq_len()), "must be positive"));
  LOOM_RETURN_IF_ERROR(Field(m.vocab() > 0, "model.vocab", str(m.vocab()), "must be positive"));
  LOOM_RETURN_IF_ERROR(Field(m.dropout() >= 0 && m.dropout() < 1, "model.dropout", str(m.dropout()),
                             "must be in [0, 1)"));
  LOOM_RETURN_IF_ERROR(Field(m.dropout() == 0 || m.family() != "onnx", "model.dropout", str(m.dropout()),
                             "applies to the built-in families (gpt, llama); an ONNX model's own Dropout nodes apply"));
  LOOM_RETURN_IF_ERROR(Field(m.dropout() == 0 || s.device() != "cuda", "model.dropout", str(m.dropout()),
                             "device: cuda runs no dropout op yet (use device: cpu or model.dropout: 0)"));
  LOOM_RETURN_IF_ERROR(ValidateDataSection(s));
  if (!s.init_from().empty()) {
    std::error_code ec;
    LOOM_RETURN_IF_ERROR(
        Field(std::filesystem::is_regular_file(s.init_from(), ec), "init_from", s.init_from(), "no such file"));
  }
  const auto& t = s.train();
  LOOM_RETURN_IF_ERROR(Field(t.steps() > 0, "train.steps", str(t.steps()), "must be positive"));
  LOOM_RETURN_IF_ERROR(Field(t.batch_size() > 0, "train.batch_size", str(t.batch_size()), "must be positive"));
  LOOM_RETURN_IF_ERROR(Field(t.lr() > 0, "train.lr", str(t.lr()), "must be positive"));
  LOOM_RETURN_IF_ERROR(CheckGradAccum(s));
  LOOM_RETURN_IF_ERROR(compiler::ValidateSchedule(t));
  const std::string& ac = t.activation_checkpointing();
  LOOM_RETURN_IF_ERROR(Field(ac.empty() || ac == "none" || ac == "blocks" || ac == "selective",
                             "train.activation_checkpointing", ac, "expected none, blocks or selective"));
  LOOM_RETURN_IF_ERROR(Field(ac.empty() || ac == "none" || m.family() != "onnx", "train.activation_checkpointing", ac,
                             "applies to the built-in families (gpt, llama)"));
  LOOM_RETURN_IF_ERROR(
      Field(t.sample_tokens() >= 0, "train.sample_tokens", str(t.sample_tokens()), "must not be negative (0: no sample)"));
  LOOM_RETURN_IF_ERROR(Field(t.precision() == "f32" || t.precision() == "bf16", "train.precision",
                             t.precision(), "expected f32 or bf16"));
  const std::string& rp = t.residual_precision();
  LOOM_RETURN_IF_ERROR(Field(rp.empty() || rp == "f32" || rp == "bf16", "train.residual_precision", rp,
                             "expected f32 or bf16"));
  LOOM_RETURN_IF_ERROR(Field(rp != "bf16" || t.precision() == "bf16", "train.residual_precision", rp,
                             "a bf16 stream needs train.precision: bf16"));
  // The sorted embedding backward (kernels/cuda/embedding.h) sorts int32 row
  // indices: a step's ids (checked over the global batch) must number < 2^31.
  const int64_t ids = int64_t{t.batch_size()} * m.seq_len();
  LOOM_RETURN_IF_ERROR(Field(!t.deterministic() || s.device() != "cuda" || ids < (int64_t{1} << 31),
                             "train.deterministic", "true",
                             absl::StrCat("the sorted embedding backward takes fewer than 2^31 ids per step; "
                                          "train.batch_size x model.seq_len = ", ids)));
  LOOM_RETURN_IF_ERROR(parallel::ValidateParallelSection(s));
  LOOM_RETURN_IF_ERROR(CheckProducts(s));
  LOOM_RETURN_IF_ERROR(Field(s.device() == "cpu" || s.device() == "cuda", "device", s.device(),
                             "expected cpu or cuda"));
  LOOM_RETURN_IF_ERROR(CheckBackend(s));
  LOOM_RETURN_IF_ERROR(CheckMemory(s));
  LOOM_RETURN_IF_ERROR(Field(t.precision() != "bf16" || s.device() == "cuda", "train.precision", t.precision(),
                             absl::StrCat("bf16 runs on device: cuda only; device: ", s.device(),
                                          " trains in f32 (set train.precision: f32)")));
  // A tokenizer other than the default bytes one is loaded and checked
  // against the model here, so a bad one fails before anything starts.
  if (s.data().tokenizer().ByteSizeLong() > 0) LOOM_RETURN_IF_ERROR(data::LoadJobTokenizer(s).status());
  return absl::OkStatus();
}

absl::StatusOr<v1::JobSpec> ReadJobSpec(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open job spec"));
  std::stringstream ss;
  ss << in.rdbuf();
  auto spec = ParseJobSpecYaml(ss.str());
  if (!spec.ok()) return Annotate(spec.status(), path);
  ApplyDefaults(*spec);
  return spec;
}

absl::StatusOr<v1::JobSpec> LoadJobSpec(const std::string& path) {
  auto spec = ReadJobSpec(path);
  if (!spec.ok()) return spec.status();
  absl::Status s = ValidateJobSpec(*spec);
  if (!s.ok()) return Annotate(s, path);
  return spec;
}

std::string ToYaml(const v1::JobSpec& spec) {
  YAML::Emitter out;
  EmitMessage(out, spec);
  return std::string(out.c_str()) + "\n";
}

}  // namespace loom::runtime::jobspec
