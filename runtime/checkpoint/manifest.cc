#include "runtime/checkpoint/manifest.h"

#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "runtime/checkpoint/safetensors.h"

namespace loom::runtime::checkpoint {
namespace {

using nlohmann::json;

constexpr int kMaxDepth = 8;
constexpr int kMaxNdim = 16;

absl::Status Bad(absl::string_view label, absl::string_view where, absl::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat("manifest ", label, ": ", where, ": ", msg));
}

// Rejects nesting deeper than kMaxDepth before building a DOM.
bool DepthOk(absl::string_view s) {
  int depth = 0;
  bool in_str = false, esc = false;
  for (char c : s) {
    if (in_str) {
      if (esc) esc = false;
      else if (c == '\\') esc = true;
      else if (c == '"') in_str = false;
    } else if (c == '"') {
      in_str = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxDepth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

// Typed field access producing errors that name the field path.
class Reader {
 public:
  explicit Reader(absl::string_view label) : label_(label) {}

  absl::StatusOr<const json*> Field(const json& obj, const char* key, const std::string& where) const {
    if (!obj.is_object()) return Bad(label_, where, "expected an object");
    auto it = obj.find(key);
    if (it == obj.end()) return Bad(label_, where, absl::StrCat("missing field '", key, "'"));
    return &*it;
  }
  absl::StatusOr<int64_t> Int(const json& obj, const char* key, const std::string& where) const {
    LOOM_ASSIGN_OR_RETURN(const json* v, Field(obj, key, where));
    return AsInt(*v, absl::StrCat(where, ".", key));
  }
  absl::StatusOr<uint64_t> Uint(const json& obj, const char* key, const std::string& where) const {
    LOOM_ASSIGN_OR_RETURN(const json* v, Field(obj, key, where));
    if (!v->is_number_unsigned()) return Bad(label_, absl::StrCat(where, ".", key), "expected an unsigned integer");
    return v->get<uint64_t>();
  }
  absl::StatusOr<std::string> Str(const json& obj, const char* key, const std::string& where) const {
    LOOM_ASSIGN_OR_RETURN(const json* v, Field(obj, key, where));
    if (!v->is_string()) return Bad(label_, absl::StrCat(where, ".", key), "expected a string");
    return v->get<std::string>();
  }
  absl::StatusOr<std::vector<int64_t>> Ints(const json& obj, const char* key, const std::string& where) const {
    LOOM_ASSIGN_OR_RETURN(const json* v, Field(obj, key, where));
    std::string w = absl::StrCat(where, ".", key);
    if (!v->is_array()) return Bad(label_, w, "expected an array of integers");
    if (v->size() > kMaxNdim) return Bad(label_, w, absl::StrCat("more than ", kMaxNdim, " entries"));
    std::vector<int64_t> out;
    for (const json& e : *v) {
      LOOM_ASSIGN_OR_RETURN(int64_t x, AsInt(e, w));
      out.push_back(x);
    }
    return out;
  }
  absl::StatusOr<int64_t> AsInt(const json& v, const std::string& where) const {
    if (v.is_number_unsigned()) {
      uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return Bad(label_, where, "integer too large");
      return static_cast<int64_t>(u);
    }
    if (v.is_number_integer()) return v.get<int64_t>();
    return Bad(label_, where, "expected an integer");
  }

 private:
  absl::string_view label_;
};

bool SafeFileName(const std::string& f) {
  return !f.empty() && f.size() <= 255 && f[0] != '.' && f.find('/') == std::string::npos &&
         f.find('\0') == std::string::npos;
}

absl::StatusOr<TensorRecord> ParseTensor(const Reader& r, const json& t, const std::string& where,
                                         absl::string_view label) {
  TensorRecord rec;
  LOOM_ASSIGN_OR_RETURN(rec.name, r.Str(t, "name", where));
  LOOM_ASSIGN_OR_RETURN(std::string dtype, r.Str(t, "dtype", where));
  auto d = ParseSafetensorsDType(dtype);
  if (!d.ok()) return Bad(label, absl::StrCat(where, ".dtype"), d.status().message());
  rec.dtype = *d;
  LOOM_ASSIGN_OR_RETURN(rec.shape, r.Ints(t, "shape", where));
  LOOM_ASSIGN_OR_RETURN(rec.spec, r.Str(t, "spec", where));
  LOOM_ASSIGN_OR_RETURN(const json* shards, r.Field(t, "shards", where));
  if (!shards->is_array()) return Bad(label, absl::StrCat(where, ".shards"), "expected an array");
  if (shards->size() > kMaxShardsPerTensor) {
    return Bad(label, absl::StrCat(where, ".shards"), absl::StrCat("more than ", kMaxShardsPerTensor, " shards"));
  }
  for (size_t i = 0; i < shards->size(); ++i) {
    const json& s = (*shards)[i];
    std::string w = absl::StrCat(where, ".shards[", i, "]");
    ShardRecord sh;
    LOOM_ASSIGN_OR_RETURN(sh.file, r.Str(s, "file", w));
    LOOM_ASSIGN_OR_RETURN(sh.key, r.Str(s, "key", w));
    LOOM_ASSIGN_OR_RETURN(sh.rank, r.Int(s, "rank", w));
    LOOM_ASSIGN_OR_RETURN(sh.offsets, r.Ints(s, "offsets", w));
    LOOM_ASSIGN_OR_RETURN(sh.lengths, r.Ints(s, "lengths", w));
    LOOM_ASSIGN_OR_RETURN(const json* br, r.Field(s, "byte_range", w));
    if (!br->is_array() || br->size() != 2 || !(*br)[0].is_number_unsigned() || !(*br)[1].is_number_unsigned()) {
      return Bad(label, absl::StrCat(w, ".byte_range"), "expected [begin, end] unsigned integers");
    }
    sh.byte_begin = (*br)[0].get<uint64_t>();
    sh.byte_end = (*br)[1].get<uint64_t>();
    LOOM_ASSIGN_OR_RETURN(uint64_t crc, r.Uint(s, "crc32c", w));
    if (crc > 0xffffffffu) return Bad(label, absl::StrCat(w, ".crc32c"), "not a 32-bit value");
    sh.crc32c = static_cast<uint32_t>(crc);
    rec.shards.push_back(std::move(sh));
  }
  return rec;
}

// Product of dims times `elem`, false on overflow or a negative dim.
bool Volume(const std::vector<int64_t>& dims, uint64_t elem, uint64_t* out) {
  uint64_t n = elem;
  for (int64_t d : dims) {
    if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  }
  *out = n;
  return true;
}

bool BoxesOverlap(const ShardRecord& a, const ShardRecord& b) {
  for (size_t d = 0; d < a.offsets.size(); ++d) {
    if (a.offsets[d] + a.lengths[d] <= b.offsets[d] || b.offsets[d] + b.lengths[d] <= a.offsets[d]) return false;
  }
  return true;
}

}  // namespace

const TensorRecord* Manifest::Find(absl::string_view name) const {
  for (const TensorRecord& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::string ManifestToJson(const Manifest& m) {
  json j;
  j["format"] = "loom-checkpoint";
  j["version"] = kManifestVersion;
  j["step"] = m.step;
  j["world_size"] = m.world_size;
  j["sampler"] = {{"seed", m.sampler.seed}, {"epoch", m.sampler.epoch}, {"position", m.sampler.position}};
  j["job_spec"] = m.job_spec;
  j["layout"] = m.layout;
  j["extra"] = m.extra;
  json tensors = json::array();
  for (const TensorRecord& t : m.tensors) {
    json shards = json::array();
    for (const ShardRecord& s : t.shards) {
      shards.push_back({{"file", s.file},
                        {"key", s.key},
                        {"rank", s.rank},
                        {"offsets", s.offsets},
                        {"lengths", s.lengths},
                        {"byte_range", {s.byte_begin, s.byte_end}},
                        {"crc32c", s.crc32c}});
    }
    tensors.push_back({{"name", t.name},
                       {"dtype", std::string(SafetensorsDTypeName(t.dtype))},
                       {"shape", t.shape},
                       {"spec", t.spec},
                       {"shards", std::move(shards)}});
  }
  j["tensors"] = std::move(tensors);
  // Invalid UTF-8 in free-form strings is replaced rather than thrown on.
  return j.dump(1, ' ', false, json::error_handler_t::replace);
}

absl::StatusOr<Manifest> ParseManifest(absl::string_view text, absl::string_view label) {
  if (text.size() > kMaxManifestBytes) {
    return Bad(label, "file", absl::StrCat(text.size(), " bytes exceeds the limit of ", kMaxManifestBytes));
  }
  if (!DepthOk(text)) return Bad(label, "file", absl::StrCat("JSON nested deeper than ", kMaxDepth));
  json j;
  try {
    j = json::parse(text.begin(), text.end());
  } catch (const std::exception& e) {
    return Bad(label, "file", absl::StrCat("malformed JSON: ", e.what()));
  }
  Reader r(label);
  Manifest m;
  LOOM_ASSIGN_OR_RETURN(std::string format, r.Str(j, "format", "top"));
  if (format != "loom-checkpoint") return Bad(label, "format", absl::StrCat("expected 'loom-checkpoint', got '", format.substr(0, 64), "'"));
  LOOM_ASSIGN_OR_RETURN(int64_t version, r.Int(j, "version", "top"));
  if (version != kManifestVersion) return Bad(label, "version", absl::StrCat("unsupported version ", version));
  LOOM_ASSIGN_OR_RETURN(m.step, r.Int(j, "step", "top"));
  LOOM_ASSIGN_OR_RETURN(m.world_size, r.Int(j, "world_size", "top"));
  LOOM_ASSIGN_OR_RETURN(const json* sampler, r.Field(j, "sampler", "top"));
  LOOM_ASSIGN_OR_RETURN(m.sampler.seed, r.Uint(*sampler, "seed", "sampler"));
  LOOM_ASSIGN_OR_RETURN(m.sampler.epoch, r.Int(*sampler, "epoch", "sampler"));
  LOOM_ASSIGN_OR_RETURN(m.sampler.position, r.Int(*sampler, "position", "sampler"));
  LOOM_ASSIGN_OR_RETURN(m.job_spec, r.Str(j, "job_spec", "top"));
  LOOM_ASSIGN_OR_RETURN(m.layout, r.Str(j, "layout", "top"));
  LOOM_ASSIGN_OR_RETURN(const json* extra, r.Field(j, "extra", "top"));
  if (!extra->is_object()) return Bad(label, "extra", "expected an object of strings");
  for (auto it = extra->begin(); it != extra->end(); ++it) {
    if (!it.value().is_string()) return Bad(label, absl::StrCat("extra.", it.key()), "expected a string");
    m.extra[it.key()] = it.value().get<std::string>();
  }
  LOOM_ASSIGN_OR_RETURN(const json* tensors, r.Field(j, "tensors", "top"));
  if (!tensors->is_array()) return Bad(label, "tensors", "expected an array");
  for (size_t i = 0; i < tensors->size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(TensorRecord t, ParseTensor(r, (*tensors)[i], absl::StrCat("tensors[", i, "]"), label));
    m.tensors.push_back(std::move(t));
  }
  LOOM_RETURN_IF_ERROR(ValidateManifest(m, label));
  return m;
}

absl::Status ValidateManifest(const Manifest& m, absl::string_view label) {
  if (m.step < 0) return Bad(label, "step", "negative");
  if (m.world_size < 1) return Bad(label, "world_size", "must be >= 1");
  std::set<absl::string_view> names;
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const TensorRecord& t = m.tensors[i];
    std::string where = absl::StrCat("tensor '", t.name.substr(0, 128), "'");
    if (t.name.empty()) return Bad(label, absl::StrCat("tensors[", i, "]"), "empty name");
    if (!names.insert(t.name).second) return Bad(label, where, "duplicate name");
    if (t.shape.size() > kMaxNdim) return Bad(label, where, "too many dims");
    uint64_t numel;
    if (!Volume(t.shape, 1, &numel) || !Volume(t.shape, DTypeSize(t.dtype), &numel)) {
      return Bad(label, where, "shape has a negative dim or overflows");
    }
    Volume(t.shape, 1, &numel);
    if (t.shards.size() > kMaxShardsPerTensor) return Bad(label, where, "too many shards");
    uint64_t covered = 0;
    for (size_t k = 0; k < t.shards.size(); ++k) {
      const ShardRecord& s = t.shards[k];
      std::string w = absl::StrCat(where, " shard ", k);
      if (!SafeFileName(s.file)) return Bad(label, w, "file must be a plain name inside the checkpoint folder");
      if (s.rank < 0 || s.rank >= m.world_size) return Bad(label, w, absl::StrCat("rank ", s.rank, " outside world_size"));
      if (s.offsets.size() != t.shape.size() || s.lengths.size() != t.shape.size()) {
        return Bad(label, w, absl::StrCat("offsets/lengths need ", t.shape.size(), " entries"));
      }
      for (size_t d = 0; d < t.shape.size(); ++d) {
        if (s.offsets[d] < 0 || s.lengths[d] < 0 || s.offsets[d] > t.shape[d] || s.lengths[d] > t.shape[d] - s.offsets[d]) {
          return Bad(label, w, absl::StrCat("dim ", d, ": [", s.offsets[d], ", +", s.lengths[d], ") outside [0, ",
                                            t.shape[d], ")"));
        }
      }
      uint64_t vol = 0, bytes = 0;  // lengths lie inside the shape, whose volume fits (checked above)
      Volume(s.lengths, 1, &vol);
      Volume(s.lengths, DTypeSize(t.dtype), &bytes);
      if (s.byte_begin > s.byte_end || s.byte_end - s.byte_begin != bytes) {
        return Bad(label, w, absl::StrCat("byte_range [", s.byte_begin, ", ", s.byte_end, "] does not hold ", bytes,
                                          " bytes"));
      }
      covered += vol;  // disjoint shards inside the shape sum to <= numel (else the overlap check fails)
      if (vol > 0) {
        for (size_t q = 0; q < k; ++q) {
          if (BoxesOverlap(s, t.shards[q])) {
            uint64_t qv = 0;
            Volume(t.shards[q].lengths, 1, &qv);
            if (qv > 0) return Bad(label, w, absl::StrCat("overlaps shard ", q));
          }
        }
      }
    }
    if (covered != numel) {
      return Bad(label, where, absl::StrCat("shards cover ", covered, " of ", numel, " elements"));
    }
  }
  return absl::OkStatus();
}

}  // namespace loom::runtime::checkpoint
