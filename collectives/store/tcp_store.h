// TcpStore: a client of StoreServer (see store.h for the operations).
//
//   LOOM_ASSIGN_OR_RETURN(std::shared_ptr<Store> store,
//                         TcpStore::Connect("127.0.0.1:29500", "job-secret"));
//
// Connect presents the per-job secret; a wrong secret returns PermissionDenied.
// One connection per client, requests serialised by a mutex (a long Wait
// holds it). Requests larger than max_message_bytes fail locally with
// ResourceExhausted. FromEnv reads LOOM_STORE_ADDR and LOOM_STORE_SECRET.
#pragma once

#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "collectives/internal/socket.h"
#include "collectives/store/store.h"
#include "collectives/store/wire.h"

namespace loom::collectives::store {

class TcpStore : public Store {
 public:
  struct Options {
    absl::Duration connect_timeout = absl::Seconds(30);
    // Bound for every request except Wait (which uses its own timeout).
    absl::Duration request_timeout = absl::Seconds(60);
    size_t max_message_bytes = wire::kDefaultMaxMessageBytes;
    // Keep retrying a refused secret until connect_timeout. For workers whose
    // rendezvous host admits the job's secret at about the time they start
    // (an agent hosting several jobs); a wrong secret still fails, at the
    // deadline, with PermissionDenied.
    bool retry_refused_secret = false;
  };

  static absl::StatusOr<std::shared_ptr<TcpStore>> Connect(absl::string_view address,
                                                           absl::string_view secret,
                                                           Options options);
  static absl::StatusOr<std::shared_ptr<TcpStore>> Connect(absl::string_view address,
                                                           absl::string_view secret) {
    return Connect(address, secret, Options());
  }
  static absl::StatusOr<std::shared_ptr<TcpStore>> FromEnv(Options options);
  static absl::StatusOr<std::shared_ptr<TcpStore>> FromEnv() { return FromEnv(Options()); }

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
  TcpStore(internal::Fd fd, Options o) : fd_(std::move(fd)), options_(o) {}
  // Sends `request`, returns the OK response's fields (after the status byte).
  absl::StatusOr<std::string> Call(const std::string& request, absl::Time deadline);

  absl::Mutex mu_;
  internal::Fd fd_;
  Options options_;
  std::string address_;
};

}  // namespace loom::collectives::store
