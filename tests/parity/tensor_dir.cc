#include "tests/parity/tensor_dir.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "nlohmann/json.hpp"

namespace loom::tests::parity {

absl::Status SaveTensorDir(const std::string& dir, const std::map<std::string, Tensor>& tensors) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(dir, ": ", ec.message()));
  nlohmann::json index = nlohmann::json::object();
  for (const auto& [name, t0] : tensors) {
    Tensor t = t0.Contiguous();
    index[name] = {{"dtype", std::string(DTypeName(t.dtype()))},
                   {"shape", std::vector<int64_t>(t.shape().begin(), t.shape().end())}};
    std::ofstream out(dir + "/" + name + ".bin", std::ios::binary);
    out.write(static_cast<const char*>(t.raw_data()), static_cast<std::streamsize>(t.nbytes()));
    if (!out) return absl::InternalError(absl::StrCat(dir, "/", name, ".bin: write failed"));
  }
  std::ofstream(dir + "/index.json") << index.dump(1);
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, Tensor>> LoadTensorDir(const std::string& dir) {
  std::ifstream in(dir + "/index.json");
  if (!in) return absl::NotFoundError(absl::StrCat(dir, "/index.json: cannot open"));
  nlohmann::json index;
  try {
    in >> index;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(dir, "/index.json: ", e.what()));
  }
  std::map<std::string, Tensor> out;
  for (auto it = index.begin(); it != index.end(); ++it) {
    LOOM_ASSIGN_OR_RETURN(DType dt, ParseDType(it.value()["dtype"].get<std::string>()));
    std::vector<int64_t> shape = it.value()["shape"].get<std::vector<int64_t>>();
    LOOM_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(shape, dt));
    std::ifstream f(dir + "/" + it.key() + ".bin", std::ios::binary);
    f.read(static_cast<char*>(t.raw_data()), static_cast<std::streamsize>(t.nbytes()));
    if (!f && t.nbytes() > 0) return absl::DataLossError(absl::StrCat(dir, "/", it.key(), ".bin: short read"));
    out.emplace(it.key(), std::move(t));
  }
  return out;
}

}  // namespace loom::tests::parity
