#include "collectives/backend.h"

#include <algorithm>
#include <cstdlib>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"

namespace loom::collectives {

std::string CollectivesHost() {
  const char* h = std::getenv("LOOM_COLLECTIVES_HOST");
  return h != nullptr && *h != '\0' ? std::string(h) : std::string("127.0.0.1");
}

namespace {

absl::Mutex registry_mu(absl::kConstInit);

std::map<std::string, BackendFactory>& Registry() {
  static auto* r = new std::map<std::string, BackendFactory>();
  return *r;
}

}  // namespace

bool RegisterBackend(absl::string_view name, BackendFactory factory) {
  absl::MutexLock l(&registry_mu);
  Registry()[std::string(name)] = std::move(factory);
  return true;
}

absl::StatusOr<std::shared_ptr<Backend>> CreateBackend(absl::string_view name,
                                                       const BackendContext& ctx) {
  BackendFactory f;
  {
    absl::MutexLock l(&registry_mu);
    auto it = Registry().find(std::string(name));
    if (it == Registry().end()) {
      std::vector<std::string> names;
      for (const auto& [n, _] : Registry()) names.push_back(n);
      return absl::NotFoundError(absl::StrCat("collectives: unknown backend '", name,
                                              "' (registered: ", absl::StrJoin(names, ", "), ")"));
    }
    f = it->second;
  }
  return f(ctx);
}

std::vector<std::string> RegisteredBackends() {
  absl::MutexLock l(&registry_mu);
  std::vector<std::string> names;
  for (const auto& [n, _] : Registry()) names.push_back(n);
  return names;
}

}  // namespace loom::collectives
