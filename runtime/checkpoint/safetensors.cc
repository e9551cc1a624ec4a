#include "runtime/checkpoint/safetensors.h"

#include <algorithm>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "runtime/checkpoint/crc32c.h"

namespace loom::runtime::checkpoint {
namespace {

using nlohmann::json;

constexpr struct {
  DType dtype;
  const char* name;
} kDTypeNames[] = {{DType::kF64, "F64"},  {DType::kF32, "F32"}, {DType::kBF16, "BF16"}, {DType::kF16, "F16"},
                   {DType::kI32, "I32"},  {DType::kI64, "I64"}, {DType::kBool, "BOOL"}};

// Builds the index from SAX events, enforcing the format's exact nesting:
//   { name: { "dtype": str, "shape": [uint...], "data_offsets": [uint, uint] }, "__metadata__": {str: str} }
class HeaderSax : public json::json_sax_t {
 public:
  HeaderSax(const SafetensorsLimits& limits) : limits_(limits) {}

  std::string error;
  std::vector<TensorEntry> tensors;
  std::map<std::string, std::string> metadata;

  bool null() override { return Fail("unexpected null"); }
  bool boolean(bool) override { return Fail("unexpected boolean"); }
  bool number_integer(number_integer_t v) override {
    if (v < 0) return Fail(absl::StrCat("negative number ", v, " in ", Where()));
    return number_unsigned(static_cast<uint64_t>(v));
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (state_ == kShape) {
      if (static_cast<int>(cur_.shape.size()) >= limits_.max_ndim) {
        return Fail(absl::StrCat("tensor '", cur_.name, "' has more than ", limits_.max_ndim, " dims"));
      }
      if (v > (1ull << 62)) return Fail(absl::StrCat("tensor '", cur_.name, "': dim ", v, " is too large"));
      cur_.shape.push_back(static_cast<int64_t>(v));
      return true;
    }
    if (state_ == kOffsets) {
      if (num_offsets_ >= 2) return Fail(absl::StrCat("tensor '", cur_.name, "': data_offsets needs 2 entries"));
      (num_offsets_ == 0 ? cur_.begin : cur_.end) = v;
      ++num_offsets_;
      return true;
    }
    return Fail(absl::StrCat("unexpected number in ", Where()));
  }
  bool number_float(number_float_t, const string_t&) override {
    return Fail(absl::StrCat("unexpected non-integer number in ", Where()));
  }
  bool binary(binary_t&) override { return Fail("unexpected binary value"); }
  bool string(string_t& s) override {
    if (state_ == kMetadata) {
      metadata[key_] = s;
      return true;
    }
    if (state_ == kTensor && key_ == "dtype") {
      if (has_dtype_) return Fail(absl::StrCat("tensor '", cur_.name, "': duplicate dtype"));
      auto d = ParseSafetensorsDType(s);
      if (!d.ok()) return Fail(absl::StrCat("tensor '", cur_.name, "': ", d.status().message()));
      cur_.dtype = *d;
      has_dtype_ = true;
      return true;
    }
    return Fail(absl::StrCat("unexpected string in ", Where()));
  }
  bool start_object(std::size_t) override {
    if (state_ == kStart) {
      state_ = kTop;
      return true;
    }
    if (state_ == kTop) {
      if (key_ == "__metadata__") {
        if (seen_metadata_) return Fail("duplicate __metadata__");
        seen_metadata_ = true;
        state_ = kMetadata;
        return true;
      }
      if (tensors.size() >= limits_.max_tensors) {
        return Fail(absl::StrCat("more than ", limits_.max_tensors, " tensors"));
      }
      if (!names_.insert(key_).second) return Fail(absl::StrCat("duplicate tensor name '", key_, "'"));
      cur_ = TensorEntry();
      cur_.name = key_;
      has_dtype_ = has_shape_ = false;
      num_offsets_ = -1;
      state_ = kTensor;
      return true;
    }
    return Fail(absl::StrCat("unexpected object in ", Where()));
  }
  bool key(string_t& k) override {
    if (state_ == kMetadata && metadata.count(k)) return Fail(absl::StrCat("duplicate metadata key '", k, "'"));
    if (state_ == kTensor && k != "dtype" && k != "shape" && k != "data_offsets") {
      return Fail(absl::StrCat("tensor '", cur_.name, "': unknown key '", k, "'"));
    }
    key_ = k;
    return true;
  }
  bool end_object() override {
    if (state_ == kMetadata) {
      state_ = kTop;
      return true;
    }
    if (state_ == kTensor) {
      if (!has_dtype_ || !has_shape_ || num_offsets_ != 2) {
        return Fail(absl::StrCat("tensor '", cur_.name, "' needs dtype, shape and data_offsets [begin, end]"));
      }
      tensors.push_back(std::move(cur_));
      state_ = kTop;
      return true;
    }
    if (state_ == kTop) {
      state_ = kDone;
      return true;
    }
    return Fail("unbalanced object");
  }
  bool start_array(std::size_t) override {
    if (state_ == kTensor && key_ == "shape") {
      if (has_shape_) return Fail(absl::StrCat("tensor '", cur_.name, "': duplicate shape"));
      has_shape_ = true;
      state_ = kShape;
      return true;
    }
    if (state_ == kTensor && key_ == "data_offsets") {
      if (num_offsets_ >= 0) return Fail(absl::StrCat("tensor '", cur_.name, "': duplicate data_offsets"));
      num_offsets_ = 0;
      state_ = kOffsets;
      return true;
    }
    return Fail(absl::StrCat("unexpected array in ", Where()));
  }
  bool end_array() override {
    if (state_ == kOffsets && num_offsets_ != 2) {
      return Fail(absl::StrCat("tensor '", cur_.name, "': data_offsets needs 2 entries"));
    }
    state_ = kTensor;
    return true;
  }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& ex) override {
    return Fail(absl::StrCat("malformed JSON at byte ", pos, ": ", ex.what()));
  }
  bool done() const { return state_ == kDone; }

 private:
  enum State { kStart, kTop, kMetadata, kTensor, kShape, kOffsets, kDone };
  bool Fail(std::string msg) {
    if (error.empty()) error = std::move(msg);
    return false;
  }
  std::string Where() const {
    switch (state_) {
      case kStart: return "the top level (expected an object)";
      case kTop: return absl::StrCat("the value of '", key_, "' (expected an object)");
      case kMetadata: return "__metadata__ (values must be strings)";
      case kTensor: return absl::StrCat("tensor '", cur_.name, "' key '", key_, "'");
      case kShape: return absl::StrCat("tensor '", cur_.name, "' shape");
      case kOffsets: return absl::StrCat("tensor '", cur_.name, "' data_offsets");
      case kDone: return "trailing data";
    }
    return "?";
  }

  const SafetensorsLimits& limits_;
  State state_ = kStart;
  std::string key_;
  TensorEntry cur_;
  bool has_dtype_ = false, has_shape_ = false, seen_metadata_ = false;
  int num_offsets_ = -1;
  std::set<std::string> names_;
};

absl::Status Bad(absl::string_view label, absl::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat("safetensors file ", label, ": ", msg));
}

uint64_t ReadLE64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// numel * dtype size, or false on overflow.
bool ByteSize(const std::vector<int64_t>& shape, DType dtype, uint64_t* out) {
  uint64_t n = DTypeSize(dtype);
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  }
  *out = n;
  return true;
}

}  // namespace

absl::string_view SafetensorsDTypeName(DType t) {
  for (const auto& e : kDTypeNames) {
    if (e.dtype == t) return e.name;
  }
  return "?";
}

absl::StatusOr<DType> ParseSafetensorsDType(absl::string_view name) {
  for (const auto& e : kDTypeNames) {
    if (name == e.name) return e.dtype;
  }
  std::string shown(name.substr(0, 32));
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported dtype '", shown, "' (supported: F64 F32 BF16 F16 I32 I64 BOOL)"));
}

const TensorEntry* SafetensorsIndex::Find(absl::string_view name) const {
  for (const TensorEntry& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

absl::StatusOr<SafetensorsIndex> ParseSafetensorsHeader(absl::string_view text, uint64_t data_size,
                                                        absl::string_view label, const SafetensorsLimits& limits) {
  if (text.size() > limits.max_header_bytes) {
    return Bad(label, absl::StrCat("header of ", text.size(), " bytes exceeds the limit of ", limits.max_header_bytes));
  }
  HeaderSax sax(limits);
  bool ok = false;
  try {
    ok = json::sax_parse(text.data(), text.data() + text.size(), &sax);
  } catch (const std::exception& e) {
    return Bad(label, absl::StrCat("malformed JSON header: ", e.what()));
  }
  if (!ok || !sax.done()) {
    return Bad(label, sax.error.empty() ? "malformed JSON header" : absl::StrCat("header: ", sax.error));
  }
  SafetensorsIndex index;
  index.metadata = std::move(sax.metadata);
  index.tensors = std::move(sax.tensors);
  for (const TensorEntry& t : index.tensors) {
    uint64_t want;
    if (!ByteSize(t.shape, t.dtype, &want)) {
      return Bad(label, absl::StrCat("tensor '", t.name, "': shape ", ShapeToString(t.shape), " overflows"));
    }
    if (t.begin > t.end || t.end > data_size) {
      return Bad(label, absl::StrCat("tensor '", t.name, "': data_offsets [", t.begin, ", ", t.end,
                                     "] out of range (data section holds ", data_size, " bytes)"));
    }
    if (t.end - t.begin != want) {
      return Bad(label, absl::StrCat("tensor '", t.name, "': data_offsets span ", t.end - t.begin,
                                     " bytes but shape ", ShapeToString(t.shape), " of ",
                                     SafetensorsDTypeName(t.dtype), " needs ", want));
    }
  }
  std::sort(index.tensors.begin(), index.tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < index.tensors.size(); ++i) {
    const TensorEntry& a = index.tensors[i - 1];
    const TensorEntry& b = index.tensors[i];
    if (b.begin < a.end) {
      return Bad(label, absl::StrCat("tensors '", a.name, "' and '", b.name, "' overlap (bytes [", a.begin, ", ",
                                     a.end, ") and [", b.begin, ", ", b.end, "))"));
    }
  }
  return index;
}

absl::StatusOr<SafetensorsIndex> ParseSafetensorsBuffer(absl::string_view file, absl::string_view label,
                                                        const SafetensorsLimits& limits) {
  if (file.size() < 8) {
    return Bad(label, absl::StrCat("file is ", file.size(), " bytes, shorter than the 8-byte header length"));
  }
  uint64_t hlen = ReadLE64(file.data());
  if (hlen > limits.max_header_bytes) {
    return Bad(label, absl::StrCat("header length ", hlen, " exceeds the limit of ", limits.max_header_bytes));
  }
  if (hlen > file.size() - 8) {
    return Bad(label, absl::StrCat("header length ", hlen, " runs past the end of the file (", file.size(),
                                   " bytes)"));
  }
  LOOM_ASSIGN_OR_RETURN(SafetensorsIndex index,
                        ParseSafetensorsHeader(file.substr(8, hlen), file.size() - 8 - hlen, label, limits));
  index.data_start = 8 + hlen;
  return index;
}

absl::StatusOr<SafetensorsReader> SafetensorsReader::Open(const std::string& path, const SafetensorsLimits& limits) {
  LOOM_ASSIGN_OR_RETURN(ScopedFd fd, OpenForRead(path));
  LOOM_ASSIGN_OR_RETURN(uint64_t size, FileSize(fd.get(), path));
  if (size < 8) return Bad(path, absl::StrCat("file is ", size, " bytes, shorter than the 8-byte header length"));
  char len[8];
  LOOM_RETURN_IF_ERROR(PreadFully(fd.get(), path, 0, len, 8));
  uint64_t hlen = ReadLE64(len);
  if (hlen > limits.max_header_bytes) {
    return Bad(path, absl::StrCat("header length ", hlen, " exceeds the limit of ", limits.max_header_bytes));
  }
  if (hlen > size - 8) {
    return Bad(path, absl::StrCat("header length ", hlen, " runs past the end of the file (", size, " bytes)"));
  }
  std::string header(static_cast<size_t>(hlen), '\0');
  LOOM_RETURN_IF_ERROR(PreadFully(fd.get(), path, 8, header.data(), header.size()));
  SafetensorsReader r;
  LOOM_ASSIGN_OR_RETURN(r.index_, ParseSafetensorsHeader(header, size - 8 - hlen, path, limits));
  r.index_.data_start = 8 + hlen;
  r.path_ = path;
  r.fd_ = std::make_shared<ScopedFd>(std::move(fd));
  return r;
}

absl::Status SafetensorsReader::ReadBytes(const TensorEntry& t, uint64_t offset, void* out, uint64_t n) const {
  if (offset > t.nbytes() || n > t.nbytes() - offset) {
    return absl::OutOfRangeError(absl::StrCat(path_, ": read of bytes [", offset, ", +", n, ") of tensor '", t.name,
                                              "' (", t.nbytes(), " bytes)"));
  }
  return PreadFully(fd_->get(), path_, index_.data_start + t.begin + offset, out, static_cast<size_t>(n));
}

absl::StatusOr<Tensor> SafetensorsReader::ReadTensor(absl::string_view name) const {
  const TensorEntry* t = index_.Find(name);
  if (t == nullptr) return absl::NotFoundError(absl::StrCat(path_, ": no tensor named '", name, "'"));
  LOOM_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(t->shape, t->dtype));
  LOOM_RETURN_IF_ERROR(ReadBytes(*t, 0, out.raw_data(), t->nbytes()));
  return out;
}

absl::StatusOr<std::string> BuildSafetensorsHeader(const std::vector<TensorToWrite>& tensors,
                                                   const std::map<std::string, std::string>& metadata) {
  json h = json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t pos = 0;
  for (const TensorToWrite& t : tensors) {
    if (t.name == "__metadata__" || h.contains(t.name)) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors writer: tensors: bad or duplicate name '", t.name, "'"));
    }
    uint64_t n;
    if (!ByteSize(t.shape, t.dtype, &n)) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors writer: tensor '", t.name, "': bad shape"));
    }
    h[t.name] = {{"dtype", std::string(SafetensorsDTypeName(t.dtype))}, {"shape", t.shape}, {"data_offsets", {pos, pos + n}}};
    pos += n;
  }
  std::string text = h.dump();
  text.append((8 - (text.size() % 8)) % 8, ' ');
  return text;
}

absl::StatusOr<std::vector<WrittenTensor>> WriteSafetensors(const std::string& path,
                                                            const std::vector<TensorToWrite>& tensors,
                                                            const std::map<std::string, std::string>& metadata,
                                                            bool do_fsync) {
  LOOM_ASSIGN_OR_RETURN(std::string header, BuildSafetensorsHeader(tensors, metadata));
  LOOM_ASSIGN_OR_RETURN(ScopedFd fd, CreateFile(path));
  char len[8];
  uint64_t hlen = header.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((hlen >> (8 * i)) & 0xff);
  LOOM_RETURN_IF_ERROR(WriteAll(fd.get(), path, len, 8));
  LOOM_RETURN_IF_ERROR(WriteAll(fd.get(), path, header.data(), header.size()));
  std::vector<WrittenTensor> out;
  uint64_t pos = 8 + hlen;
  for (const TensorToWrite& t : tensors) {
    uint64_t n = 0;
    ByteSize(t.shape, t.dtype, &n);
    WrittenTensor w;
    w.name = t.name;
    w.file_begin = pos;
    w.file_end = pos + n;
    int sunk = 0;
    auto sink = [&](const void* bytes) {
      ++sunk;
      w.crc32c = Crc32c(bytes, n);
      return WriteAll(fd.get(), path, bytes, n);
    };
    if (t.data == nullptr && t.produce) {
      LOOM_RETURN_IF_ERROR(t.produce(sink));
    } else {
      LOOM_RETURN_IF_ERROR(sink(t.data));  // null only for an empty tensor
    }
    if (sunk != 1)
      return absl::InternalError(absl::StrCat(path, ": tensor '", t.name, "': its bytes were given ", sunk,
                                              " times (expected once)"));
    pos += n;
    out.push_back(std::move(w));
  }
  if (do_fsync) LOOM_RETURN_IF_ERROR(FsyncFile(fd.get(), path));
  return out;
}

}  // namespace loom::runtime::checkpoint
