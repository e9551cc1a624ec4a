#include "runtime/service/dashboard/assets.h"

namespace loom::runtime::service::dashboard {

const Asset* FindAsset(std::string_view path) {
  const Asset* table = Assets();
  for (int i = 0; i < NumAssets(); ++i) {
    if (path == table[i].path) return &table[i];
  }
  return nullptr;
}

}  // namespace loom::runtime::service::dashboard
