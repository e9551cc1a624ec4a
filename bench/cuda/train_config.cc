#include "bench/cuda/train_config.h"

#include <fstream>
#include <iterator>
#include <map>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/rng.h"
#include "base/status.h"
#include <nlohmann/json.hpp>

namespace loom::bench::cuda {

const std::vector<TrainPreset>& TrainPresets() {
  static const std::vector<TrainPreset> presets = {
      {"gpt2-124m", "gpt", 12, 12, 12, 768, 3072, 1024, 50304, 16},
      {"gpt2-350m", "gpt", 24, 16, 16, 1024, 4096, 1024, 50304, 16},
      {"llama-124m", "llama", 12, 12, 4, 768, 2048, 2048, 32000, 8},
      {"llama-350m", "llama", 24, 16, 4, 1024, 2816, 2048, 32000, 8},
      {"llama-1b", "llama", 22, 32, 4, 2048, 5632, 2048, 32000, 8},
  };
  return presets;
}

namespace {

absl::Status Bad(absl::string_view flag, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(flag, ": ", why));
}

absl::Status ApplyPreset(absl::string_view name, TrainFlags* f) {
  for (const TrainPreset& p : TrainPresets()) {
    if (p.name != name) continue;
    f->preset = p.name;
    f->spec.set_family(p.family);
    f->spec.set_n_layer(p.n_layer);
    f->spec.set_n_head(p.n_head);
    f->spec.set_n_kv_head(p.family == "gpt" ? 0 : p.n_kv_head);
    f->spec.set_d_model(p.d_model);
    f->spec.set_ffn_hidden(p.ffn);
    f->spec.set_seq_len(p.seq_len);
    f->spec.set_vocab(p.vocab);
    f->batch = p.batch;
    return absl::OkStatus();
  }
  std::string names;
  for (const TrainPreset& p : TrainPresets()) absl::StrAppend(&names, names.empty() ? "" : "|", p.name);
  return Bad("--preset", absl::StrCat("unknown preset '", name, "' (expected ", names, ")"));
}

// The model builder's key for a spec field, and the flag that sets it.
const std::map<std::string, std::string>& FlagOfKey() {
  static const std::map<std::string, std::string> m = {
      {"model.family", "--family"},   {"model.n_layer", "--n_layer"}, {"model.n_head", "--n_head"},
      {"model.n_kv_head", "--n_kv_head"}, {"model.d_model", "--d_model"}, {"model.seq_len", "--seq_len"},
      {"model.vocab", "--vocab"},     {"model.ffn_hidden", "--ffn"}};
  return m;
}

// Sets an integer field from "--name=value": false when `arg` is not that flag.
absl::StatusOr<bool> IntFlag(absl::string_view arg, absl::string_view name, int64_t lo, int64_t* out) {
  const std::string prefix = absl::StrCat("--", name, "=");
  if (!absl::StartsWith(arg, prefix)) return false;
  absl::string_view v = arg.substr(prefix.size());
  int64_t x = 0;
  if (!absl::SimpleAtoi(v, &x) || x < lo || x > (int64_t{1} << 31) - 1)
    return Bad(absl::StrCat("--", name), absl::StrCat("expected an integer >= ", lo, ", got '", v, "'"));
  *out = x;
  return true;
}

absl::Status ParseShapeOrRunFlag(absl::string_view a, TrainFlags* f) {
  v1::ModelSpec& s = f->spec;
  int64_t x = 0;
  struct IntField {
    const char* name;
    int64_t lo;
    bool shape;  // a model or batch field: the run is no longer the preset
    void (*set)(TrainFlags*, int64_t);
  };
  static const IntField fields[] = {
      {"n_layer", 1, true, [](TrainFlags* t, int64_t v) { t->spec.set_n_layer(v); }},
      {"n_head", 1, true, [](TrainFlags* t, int64_t v) { t->spec.set_n_head(v); }},
      {"n_kv_head", 0, true, [](TrainFlags* t, int64_t v) { t->spec.set_n_kv_head(v); }},
      {"d_model", 1, true, [](TrainFlags* t, int64_t v) { t->spec.set_d_model(v); }},
      {"ffn", 0, true, [](TrainFlags* t, int64_t v) { t->spec.set_ffn_hidden(v); }},
      {"seq_len", 1, true, [](TrainFlags* t, int64_t v) { t->spec.set_seq_len(v); }},
      {"vocab", 1, true, [](TrainFlags* t, int64_t v) { t->spec.set_vocab(v); }},
      {"batch", 1, true, [](TrainFlags* t, int64_t v) { t->batch = v; }},
      {"warmup", 0, false, [](TrainFlags* t, int64_t v) { t->warmup = static_cast<int>(v); }},
      {"steps", 1, false, [](TrainFlags* t, int64_t v) { t->steps = static_cast<int>(v); }},
      {"arena-offset-gib", 0, false, [](TrainFlags* t, int64_t v) { t->arena_offset_gib = v; }},
      {"arena-guard-bytes", 0, false, [](TrainFlags* t, int64_t v) { t->arena_guard_bytes = v; }},
  };
  for (const IntField& fld : fields) {
    LOOM_ASSIGN_OR_RETURN(bool hit, IntFlag(a, fld.name, fld.lo, &x));
    if (hit) {
      fld.set(f, x);
      if (fld.shape) f->preset = "custom";
      return absl::OkStatus();
    }
  }
  if (absl::StartsWith(a, "--family=")) {
    absl::string_view v = a.substr(9);
    if (v != "gpt" && v != "llama") return Bad("--family", absl::StrCat("expected gpt or llama, got '", v, "'"));
    s.set_family(std::string(v));
    f->preset = "custom";
  } else if (absl::StartsWith(a, "--data=")) {
    f->data = std::string(a.substr(7));
  } else if (absl::StartsWith(a, "--text=")) {
    f->text = std::string(a.substr(7));
  } else if (absl::StartsWith(a, "--torch=")) {
    f->torch = absl::StrSplit(a.substr(8), ',', absl::SkipEmpty());
  } else if (absl::StartsWith(a, "--loss-tol=")) {
    if (!absl::SimpleAtod(a.substr(11), &f->loss_tol) || !(f->loss_tol > 0))
      return Bad("--loss-tol", absl::StrCat("expected a positive number, got '", a.substr(11), "'"));
  } else if (a == "--f32") { f->f32 = true;
  } else if (a == "--no-graph") { f->graph = false;
  } else if (a == "--attention=flash") { f->flash = true;
  } else if (a == "--attention=dispatch") { f->flash = false;
  } else if (a == "--no-fusions") { f->fusions = false;
  } else if (a == "--profile") { f->profile = true;
  } else if (a == "--deterministic") { f->deterministic = true;
  } else if (a == "--poison-arena") { f->poison_arena = true;
  } else if (a == "--activation-checkpointing=blocks") { f->checkpoint = true;
  } else if (a == "--activation-checkpointing=none") { f->checkpoint = false;
  } else if (a == "--offload-optimizer-state") { f->offload = true;
  } else if (a == "--residual=f32") { f->f32_residual = true;
  } else if (a == "--residual=bf16") { f->f32_residual = false;
  } else if (a == "--memory=lean") { f->lean = true;
  } else if (a == "--memory=standard") { f->lean = false;
  } else if (a == "--grads=bf16") { f->bf16_grads = true;
  } else if (a == "--grads=f32") { f->bf16_grads = false;
  } else if (a == "--embedding-backward=sorted") { f->sorted_embedding = true;
  } else if (a == "--embedding-backward=atomic") { f->sorted_embedding = false;
  } else {
    std::string name(a.substr(0, a.find('=')));
    return Bad(name, absl::StrCat("unknown flag or value '", a, "'"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TrainFlags> ParseTrainFlags(int argc, const char* const* argv) {
  LOOM_ASSIGN_OR_RETURN(TrainFlags f, ParseModelFlags(argc, argv));
  if (f.data.empty() == f.text.empty())
    return Bad("--data", "give exactly one of --data=DIR (the folder train_torch.py --init wrote) and --text=FILE "
                         "(Loom's own initialisation, batches of the file's bytes)");
  if (!f.text.empty() && !f.torch.empty()) return Bad("--torch", "compares against --data runs only, not --text");
  return f;
}

absl::StatusOr<TrainFlags> ParseModelFlags(int argc, const char* const* argv) {
  TrainFlags f;
  LOOM_RETURN_IF_ERROR(ApplyPreset(f.preset, &f));
  // The preset first, wherever it stands, so the other flags override it.
  for (int i = 1; i < argc; ++i)
    if (absl::StartsWith(argv[i], "--preset=")) LOOM_RETURN_IF_ERROR(ApplyPreset(argv[i] + 9, &f));
  for (int i = 1; i < argc; ++i)
    if (!absl::StartsWith(argv[i], "--preset=")) LOOM_RETURN_IF_ERROR(ParseShapeOrRunFlag(argv[i], &f));
  bool kv_given = false;
  for (int i = 1; i < argc; ++i) kv_given = kv_given || absl::StartsWith(argv[i], "--n_kv_head=");
  if (f.spec.family() == "gpt" && !kv_given) f.spec.set_n_kv_head(0);  // gpt's kv heads are its heads
  absl::StatusOr<std::vector<compiler::models::ParamInfo>> params = compiler::models::Parameters(f.spec);
  if (!params.ok()) {
    std::string msg(params.status().message());
    for (const auto& [key, flag] : FlagOfKey())
      if (absl::StartsWith(msg, key + ":")) return Bad(flag, msg);
    return absl::InvalidArgumentError(msg);
  }
  return f;
}

absl::Status CheckDataConfig(const TrainFlags& f) {
  const std::string path = f.data + "/config.json";
  std::ifstream in(path);
  if (!in) return absl::FailedPreconditionError(absl::StrCat("--data: ", path, " is missing (train_torch.py --init)"));
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return absl::FailedPreconditionError("--data: " + path + " is not JSON");
  const v1::ModelSpec& s = f.spec;
  const std::vector<std::pair<const char*, int64_t>> want = {
      {"n_layer", s.n_layer()}, {"n_head", s.n_head()}, {"n_kv_head", s.n_kv_head() > 0 ? s.n_kv_head() : s.n_head()},
      {"d_model", s.d_model()}, {"ffn", s.ffn_hidden() > 0 ? s.ffn_hidden() : 4 * s.d_model()},
      {"seq_len", s.seq_len()}, {"vocab", s.vocab()}, {"batch", f.batch}};
  if (j.value("family", std::string()) != s.family())
    return absl::FailedPreconditionError(absl::StrCat("--data: ", path, " has family '", j.value("family", ""),
                                                      "', this run ", s.family()));
  for (const auto& [key, v] : want)
    if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int64_t>() != v)
      return absl::FailedPreconditionError(absl::StrCat("--data: ", path, " has ", key, " = ",
                                                        j.contains(key) ? j[key].dump() : "nothing", ", this run ", v));
  return absl::OkStatus();
}

absl::StatusOr<TextBatches> TextBatches::Open(const std::string& path, int64_t seq_len, int64_t batch,
                                              int64_t vocab) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("--text: cannot read ", path));
  auto bytes = std::make_shared<std::string>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (static_cast<int64_t>(bytes->size()) < seq_len + 2)
    return Bad("--text", absl::StrCat(path, " has ", bytes->size(), " bytes, fewer than seq_len + 2 = ", seq_len + 2));
  if (vocab < 256) return Bad("--vocab", absl::StrCat("--text takes a token per byte: the vocabulary must be >= 256, got ", vocab));
  TextBatches t;
  t.bytes_ = std::move(bytes);
  t.seq_len_ = seq_len;
  t.batch_ = batch;
  return t;
}

std::pair<Tensor, Tensor> TextBatches::Batch(int64_t step, DType x_dtype, DType y_dtype) const {
  Tensor x = Tensor::Zeros({batch_, seq_len_}, x_dtype), y = Tensor::Zeros({batch_, seq_len_}, y_dtype);
  const Philox rng(2, static_cast<uint64_t>(step));
  const uint64_t span = bytes_->size() - seq_len_ - 1;  // offsets [0, span]
  for (int64_t r = 0; r < batch_; ++r) {
    const uint64_t draw = (uint64_t{rng.Bits(2 * r)} << 32) | rng.Bits(2 * r + 1);
    const int64_t off = static_cast<int64_t>(draw % (span + 1));
    for (int64_t j = 0; j < seq_len_; ++j) {
      x.SetDouble(r * seq_len_ + j, static_cast<unsigned char>((*bytes_)[off + j]));
      y.SetDouble(r * seq_len_ + j, static_cast<unsigned char>((*bytes_)[off + j + 1]));
    }
  }
  return {x, y};
}

double TrainFlopsPerToken(const v1::ModelSpec& spec, const std::vector<compiler::models::ParamInfo>& params) {
  double matmul = 0;
  for (const compiler::models::ParamInfo& p : params) {
    if (p.shape.size() != 2 || p.name == "wpe" || p.name == "tok_embeddings") continue;
    matmul += static_cast<double>(p.shape[0]) * static_cast<double>(p.shape[1]);
  }
  const double attention = 12.0 * spec.n_layer() * spec.d_model() * spec.seq_len();  // H * D = d_model
  return 6 * matmul + attention;
}

}  // namespace loom::bench::cuda
