#include "compiler/import/onnx/tensor_proto.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"

namespace loom::compiler::import::onnx {
namespace {

using TP = ::onnx::TensorProto;

absl::Status Bad(absl::string_view what, absl::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", msg));
}

// realpath, or an error naming the path.
absl::StatusOr<std::string> RealPath(const std::string& p, absl::string_view what) {
  char buf[PATH_MAX];
  if (!::realpath(p.c_str(), buf)) return Bad(what, absl::StrCat("external data '", p, "': ", std::strerror(errno)));
  return std::string(buf);
}

bool Inside(const std::string& path, const std::string& root) {
  if (path == root) return false;
  const std::string r = root.back() == '/' ? root : root + "/";
  return path.compare(0, r.size(), r) == 0;
}

struct ExternalRef {
  std::string location;
  int64_t offset = 0, length = -1;
};

absl::StatusOr<ExternalRef> ParseExternal(const TP& t, absl::string_view what) {
  ExternalRef r;
  for (const auto& kv : t.external_data()) {
    if (kv.key() == "location") {
      r.location = kv.value();
    } else if (kv.key() == "offset" || kv.key() == "length") {
      int64_t v = 0;
      if (!absl::SimpleAtoi(kv.value(), &v) || v < 0)
        return Bad(what, absl::StrCat("external data ", kv.key(), " '", kv.value(), "' is not a non-negative integer"));
      (kv.key() == "offset" ? r.offset : r.length) = v;
    }
  }
  if (r.location.empty()) return Bad(what, "external data has no location");
  if (r.location.find('\0') != std::string::npos) return Bad(what, "external data location contains a NUL byte");
  if (std::filesystem::path(r.location).is_absolute())
    return Bad(what, absl::StrCat("external data location '", r.location, "' is absolute; it must be relative to the model"));
  return r;
}

// Reads `bytes` bytes of external data into `dst` after the path checks.
absl::Status ReadExternal(const TP& t, const TensorReadOptions& o, absl::string_view what, void* dst, int64_t bytes) {
  LOOM_ASSIGN_OR_RETURN(ExternalRef r, ParseExternal(t, what));
  if (o.base_dir.empty()) return Bad(what, "external data needs the model's folder (import from a file path)");
  LOOM_ASSIGN_OR_RETURN(std::string real, RealPath(o.base_dir + "/" + r.location, what));
  std::vector<std::string> roots = o.allowed_roots;
  if (roots.empty()) roots.push_back(o.base_dir);
  bool inside = false;
  for (const std::string& root : roots) {
    auto rr = RealPath(root, what);
    inside = inside || (rr.ok() && Inside(real, *rr));
  }
  if (!inside)
    return Bad(what, absl::StrCat("external data '", r.location, "' resolves to ", real, ", outside the allowed roots (",
                                  absl::StrJoin(roots, ", "), ")"));
  if (r.length >= 0 && r.length != bytes)
    return Bad(what, absl::StrCat("external data length ", r.length, " does not match the tensor's ", bytes, " bytes"));
  int fd = ::open(real.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Bad(what, absl::StrCat("external data '", real, "': ", std::strerror(errno)));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Bad(what, absl::StrCat("external data '", real, "' is not a regular file"));
  }
  if (r.offset > st.st_size || bytes > st.st_size - r.offset) {
    ::close(fd);
    return Bad(what, absl::StrCat("external data region [", r.offset, ", ", r.offset + bytes, ") lies outside '",
                                  real, "' (", st.st_size, " bytes)"));
  }
  int64_t done = 0;
  while (done < bytes) {
    ssize_t n = ::pread(fd, static_cast<char*>(dst) + done, static_cast<size_t>(bytes - done), r.offset + done);
    if (n <= 0) {
      ::close(fd);
      return Bad(what, absl::StrCat("reading external data '", real, "' failed"));
    }
    done += n;
  }
  ::close(fd);
  return absl::OkStatus();
}

// Typed-field data (float_data, int32_data, ...) into `out`.
absl::Status ReadTypedFields(const TP& t, absl::string_view what, Tensor& out) {
  const int64_t n = out.numel();
  auto count_error = [&](int64_t got) {
    return Bad(what, absl::StrCat("holds ", got, " values, its shape ", ShapeToString(out.shape()), " needs ", n));
  };
  switch (out.dtype()) {
    case DType::kF32:
      if (t.float_data_size() != n) return count_error(t.float_data_size());
      std::memcpy(out.raw_data(), t.float_data().data(), n * sizeof(float));
      return absl::OkStatus();
    case DType::kF64:
      if (t.double_data_size() != n) return count_error(t.double_data_size());
      std::memcpy(out.raw_data(), t.double_data().data(), n * sizeof(double));
      return absl::OkStatus();
    case DType::kI64:
      if (t.int64_data_size() != n) return count_error(t.int64_data_size());
      std::memcpy(out.raw_data(), t.int64_data().data(), n * sizeof(int64_t));
      return absl::OkStatus();
    case DType::kI32:
    case DType::kBool:
    case DType::kF16:
    case DType::kBF16: {
      if (t.int32_data_size() != n) return count_error(t.int32_data_size());
      for (int64_t i = 0; i < n; ++i) {
        const int32_t v = t.int32_data(static_cast<int>(i));
        if (out.dtype() == DType::kI32) out.data<int32_t>()[i] = v;
        else if (out.dtype() == DType::kBool) static_cast<uint8_t*>(out.raw_data())[i] = v != 0;
        else static_cast<uint16_t*>(out.raw_data())[i] = static_cast<uint16_t>(v & 0xffff);
      }
      return absl::OkStatus();
    }
  }
  return Bad(what, "unsupported dtype");
}

}  // namespace

absl::StatusOr<DType> LoomDType(int onnx_type) {
  switch (onnx_type) {
    case TP::FLOAT: return DType::kF32;
    case TP::DOUBLE: return DType::kF64;
    case TP::FLOAT16: return DType::kF16;
    case TP::BFLOAT16: return DType::kBF16;
    case TP::INT32: return DType::kI32;
    case TP::INT64: return DType::kI64;
    case TP::BOOL: return DType::kBool;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "dtype ", OnnxTypeName(onnx_type),
          " is not supported (Loom has FLOAT, DOUBLE, FLOAT16, BFLOAT16, INT32, INT64 and BOOL)"));
  }
}

int OnnxType(DType dtype) {
  switch (dtype) {
    case DType::kF32: return TP::FLOAT;
    case DType::kF64: return TP::DOUBLE;
    case DType::kF16: return TP::FLOAT16;
    case DType::kBF16: return TP::BFLOAT16;
    case DType::kI32: return TP::INT32;
    case DType::kI64: return TP::INT64;
    case DType::kBool: return TP::BOOL;
  }
  return TP::UNDEFINED;
}

std::string OnnxTypeName(int onnx_type) {
  if (TP::DataType_IsValid(onnx_type)) return TP::DataType_Name(static_cast<TP::DataType>(onnx_type));
  return absl::StrCat("type ", onnx_type);
}

absl::StatusOr<int64_t> CheckedNumel(absl::Span<const int64_t> dims, int64_t max_elements, absl::string_view what) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) return Bad(what, absl::StrCat("negative dim ", d, " in shape ", ShapeToString(dims)));
    if (d != 0 && n > max_elements / d)
      return Bad(what, absl::StrCat("shape ", ShapeToString(dims), " exceeds the limit of ", max_elements, " elements"));
    n *= d;
  }
  if (n > max_elements)
    return Bad(what, absl::StrCat("shape ", ShapeToString(dims), " exceeds the limit of ", max_elements, " elements"));
  return n;
}

absl::StatusOr<Tensor> FromTensorProto(const TP& t, const TensorReadOptions& o, absl::string_view what) {
  auto dt = LoomDType(t.data_type());
  if (!dt.ok()) return Bad(what, dt.status().message());
  if (t.has_segment()) return Bad(what, "segmented tensors are not supported");
  std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
  LOOM_ASSIGN_OR_RETURN(int64_t n, CheckedNumel(dims, o.max_elements, what));
  const int64_t bytes = n * static_cast<int64_t>(DTypeSize(*dt));
  LOOM_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(dims, *dt));
  if (t.data_location() == TP::EXTERNAL) {
    LOOM_RETURN_IF_ERROR(ReadExternal(t, o, what, out.raw_data(), bytes));
    return out;
  }
  if (t.has_raw_data()) {
    if (static_cast<int64_t>(t.raw_data().size()) != bytes)
      return Bad(what, absl::StrCat("raw_data has ", t.raw_data().size(), " bytes, its shape ", ShapeToString(dims),
                                    " needs ", bytes));
    if (bytes > 0) std::memcpy(out.raw_data(), t.raw_data().data(), static_cast<size_t>(bytes));
    if (*dt == DType::kBool)
      for (int64_t i = 0; i < n; ++i) static_cast<uint8_t*>(out.raw_data())[i] = static_cast<uint8_t*>(out.raw_data())[i] != 0;
    return out;
  }
  LOOM_RETURN_IF_ERROR(ReadTypedFields(t, what, out));
  return out;
}

::onnx::TensorProto ToTensorProto(const Tensor& t, const std::string& name) {
  TP p;
  p.set_name(name);
  p.set_data_type(OnnxType(t.dtype()));
  for (int64_t d : t.shape()) p.add_dims(d);
  const Tensor c = t.Contiguous();
  p.set_raw_data(std::string(static_cast<const char*>(c.raw_data()), c.nbytes()));
  return p;
}

}  // namespace loom::compiler::import::onnx
