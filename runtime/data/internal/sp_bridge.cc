#include "runtime/data/internal/sp_bridge.h"

#include <dlfcn.h>
#include <unistd.h>

#include <filesystem>

namespace loom::runtime::data::internal {
namespace {

// Where the library may be: beside the executable, or in runtime/data/ of
// the executable's folder or a folder above it.
std::vector<std::string> Candidates() {
  std::vector<std::string> out;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (std::filesystem::path dir = exe.parent_path(); !dir.empty(); dir = dir.parent_path()) {
      out.push_back((dir / kSpLibraryName).string());
      out.push_back((dir / "runtime" / "data" / kSpLibraryName).string());
      if (dir == dir.root_path()) break;
    }
  }
  out.push_back(kSpLibraryName);  // the dynamic loader's own search
  return out;
}

struct Loaded {
  const SpApi* api = nullptr;
  std::string error;
};

Loaded Open() {
  Loaded l;
  std::string tried;
  for (const std::string& path : Candidates()) {
    if (path.find('/') != std::string::npos && access(path.c_str(), R_OK) != 0) continue;
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (handle == nullptr) {
      tried += std::string("; ") + dlerror();
      continue;
    }
    auto entry = reinterpret_cast<const SpApi* (*)()>(dlsym(handle, "loom_sentencepiece_api"));
    if (entry == nullptr || entry()->version != kSpApiVersion) {
      tried += "; " + path + ": no loom_sentencepiece_api of version " + std::to_string(kSpApiVersion);
      continue;
    }
    l.api = entry();
    return l;
  }
  l.error = std::string("SentencePiece is unavailable: cannot load ") + kSpLibraryName +
            " (looked beside the executable and in runtime/data/ above it" + tried + ")";
  return l;
}

}  // namespace

const SpApi* SentencePieceApi(std::string* error) {
  static const Loaded* loaded = new Loaded(Open());
  if (loaded->api == nullptr) *error = loaded->error;
  return loaded->api;
}

std::unique_ptr<SpModel> SpModel::Load(const std::string& serialized, std::string* error) {
  const SpApi* api = SentencePieceApi(error);
  if (api == nullptr) return nullptr;
  void* model = api->load(serialized, error);
  if (model == nullptr) return nullptr;
  return std::unique_ptr<SpModel>(new SpModel(api, model));
}

SpModel::~SpModel() { api_->destroy(model_); }

std::string SpTrain(const SpTrainOptions& options, const std::function<bool(std::string*)>& next,
                    std::string* serialized) {
  std::string error;
  const SpApi* api = SentencePieceApi(&error);
  if (api == nullptr) return error;
  return api->train(options, next, serialized);
}

}  // namespace loom::runtime::data::internal
