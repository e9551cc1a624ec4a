// Store: the key-value interface used for rendezvous (addresses, unique ids,
// counters, barriers). Implemented by TcpStore (a client of StoreServer) and
// wrapped by PrefixStore to give each group/backend its own key space.
//
//   LOOM_ASSIGN_OR_RETURN(auto store, TcpStore::Connect("127.0.0.1:29500", secret));
//   LOOM_RETURN_IF_ERROR(store->Set("addr/3", "127.0.0.1:41000"));
//   LOOM_RETURN_IF_ERROR(store->Wait({"addr/0"}, absl::Seconds(30)));
//
// Values are opaque bytes. Counters (Add) are stored as decimal strings, so
// Get on a counter key returns e.g. "5". Every call is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace loom::collectives::store {

class Store {
 public:
  virtual ~Store() = default;

  [[nodiscard]] virtual absl::Status Set(absl::string_view key, absl::string_view value) = 0;
  // NotFound when the key is absent (does not wait; see WaitGet).
  [[nodiscard]] virtual absl::StatusOr<std::string> Get(absl::string_view key) = 0;
  // Atomically adds `delta` to the counter at `key` (absent = 0); returns the new value.
  [[nodiscard]] virtual absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) = 0;
  // Waits until every key exists. DeadlineExceeded (naming the missing keys) after `timeout`.
  [[nodiscard]] virtual absl::Status Wait(absl::Span<const std::string> keys,
                                          absl::Duration timeout) = 0;
  // If the current value equals `expected` (an absent key equals ""), stores
  // `desired`. Returns the value stored after the call ("" if absent): equal to
  // `desired` iff this caller won (the fencing token for rendezvous).
  [[nodiscard]] virtual absl::StatusOr<std::string> CompareAndSet(absl::string_view key,
                                                                  absl::string_view expected,
                                                                  absl::string_view desired) = 0;
  // Returns whether the key existed.
  [[nodiscard]] virtual absl::StatusOr<bool> Delete(absl::string_view key) = 0;
  // Keys starting with `prefix`, sorted.
  [[nodiscard]] virtual absl::StatusOr<std::vector<std::string>> List(absl::string_view prefix) = 0;
  // Deletes keys starting with `prefix`; returns how many.
  [[nodiscard]] virtual absl::StatusOr<int64_t> DeletePrefix(absl::string_view prefix) = 0;

  // Wait({key}) then Get(key).
  [[nodiscard]] absl::StatusOr<std::string> WaitGet(absl::string_view key, absl::Duration timeout);
};

// Prepends "<prefix>/" to every key of `base`.
class PrefixStore : public Store {
 public:
  PrefixStore(std::shared_ptr<Store> base, absl::string_view prefix);
  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::Status Wait(absl::Span<const std::string> keys, absl::Duration timeout) override;
  absl::StatusOr<std::string> CompareAndSet(absl::string_view key, absl::string_view expected,
                                            absl::string_view desired) override;
  absl::StatusOr<bool> Delete(absl::string_view key) override;
  absl::StatusOr<std::vector<std::string>> List(absl::string_view prefix) override;
  absl::StatusOr<int64_t> DeletePrefix(absl::string_view prefix) override;

 private:
  std::string K(absl::string_view key) const;
  std::shared_ptr<Store> base_;
  std::string prefix_;
};

}  // namespace loom::collectives::store
