#include "collectives/store/store.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace loom::collectives::store {

absl::StatusOr<std::string> Store::WaitGet(absl::string_view key, absl::Duration timeout) {
  std::vector<std::string> keys{std::string(key)};
  absl::Status s = Wait(keys, timeout);
  if (!s.ok()) return s;
  return Get(key);
}

PrefixStore::PrefixStore(std::shared_ptr<Store> base, absl::string_view prefix)
    : base_(std::move(base)), prefix_(absl::StrCat(prefix, "/")) {}

std::string PrefixStore::K(absl::string_view key) const { return absl::StrCat(prefix_, key); }

absl::Status PrefixStore::Set(absl::string_view key, absl::string_view value) {
  return base_->Set(K(key), value);
}
absl::StatusOr<std::string> PrefixStore::Get(absl::string_view key) { return base_->Get(K(key)); }
absl::StatusOr<int64_t> PrefixStore::Add(absl::string_view key, int64_t delta) {
  return base_->Add(K(key), delta);
}
absl::Status PrefixStore::Wait(absl::Span<const std::string> keys, absl::Duration timeout) {
  std::vector<std::string> k;
  for (const auto& key : keys) k.push_back(K(key));
  return base_->Wait(k, timeout);
}
absl::StatusOr<std::string> PrefixStore::CompareAndSet(absl::string_view key,
                                                       absl::string_view expected,
                                                       absl::string_view desired) {
  return base_->CompareAndSet(K(key), expected, desired);
}
absl::StatusOr<bool> PrefixStore::Delete(absl::string_view key) { return base_->Delete(K(key)); }
absl::StatusOr<std::vector<std::string>> PrefixStore::List(absl::string_view prefix) {
  auto r = base_->List(K(prefix));
  if (!r.ok()) return r.status();
  for (auto& k : *r) k = k.substr(prefix_.size());
  return r;
}
absl::StatusOr<int64_t> PrefixStore::DeletePrefix(absl::string_view prefix) {
  return base_->DeletePrefix(K(prefix));
}

}  // namespace loom::collectives::store
